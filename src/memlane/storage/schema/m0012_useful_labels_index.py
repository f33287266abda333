"""0012: a partial index of the candidate rows labelled useful, for ``useful_before``.

The predictor's ``useful_before`` signal (feature schema v8,
:func:`memlane.storage.predictor.useful_before`) asks, for each score request and each session
loaded for training, which of ~50-100 candidates were labelled useful (final label > 0.5) in
an earlier session. Those rows are a few per session among ~50-100 candidate rows; the partial
index holds only them, so the read touches the useful rows of the candidates and not every
row in which they were ever a candidate (which grows with every session).
"""

NAME = "0012_useful_labels_index"

SQL = """
CREATE INDEX IF NOT EXISTS idx_session_memories_useful ON session_memories(memory_id, session_key)
    WHERE label > 0.5;
"""
