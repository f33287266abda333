"""Recall internals: the vector index (vector leg) and the merge and boost rules.

Modules:
    vector_index  exact cosine KNN over float32 vectors of one model, with filters.
    hybrid        alpha-weighted merge of the legs, rehearsal and recency boosts.
"""
