"""0017: sentence vectors of documents persisted for drift detection (docs/drift.md).

* ``drift_sentence_vectors``: per document and embedding model, the unit float32 vectors
  ``[n, dimensions]`` (row-major, little-endian) of the sentences of the document's current text,
  and ``text_hash`` (SHA-256 of that text) saying which version they belong to. One row per
  (document, model): a new version replaces it; purging the document (retention) deletes it. A daemon that
  restarts reads them instead of embedding every referenced document's sentences again.
"""

NAME = "0017_drift_sentences"

SQL = """
CREATE TABLE drift_sentence_vectors (
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    model       TEXT NOT NULL,
    text_hash   TEXT NOT NULL,
    sentences   INTEGER NOT NULL CHECK (sentences >= 0),
    dimensions  INTEGER NOT NULL CHECK (dimensions > 0),
    vectors     BLOB NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (document_id, model)
) WITHOUT ROWID;
"""
