"""Recall internals: the vector index (vector leg) and the merge and boost rules.

Modules:
    memory_index  every memory's ranking fields + one model's vectors: exact cosine KNN with
                  filters, and the session-start effectiveScore ranking.
    hybrid        alpha-weighted merge of the legs, rehearsal and recency boosts.
"""
