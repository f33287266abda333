"""0020: per-reference drift baselines (docs/drift.md "Detection at retrieval").

A memory's document reference records, the first time it is checked against a document (the
check queued when the memory is written or updated, or the first check after the document is
ingested), the maximum cosine similarity between the memory's claim and that document:

* ``baseline_similarity``: that similarity (in [-1, 1]);
* ``baseline_model``: the embedding model it was measured with (another model's baseline is
  measured again);
* ``baseline_document``: the document id it was measured against (a re-ingest or a new version
  is another document);
* ``baseline_slots``: a JSON array of the claim's slots (numbers, versions, dates, code
  identifiers) that its own sentence in that document held;
* ``baseline_at``: when.

Drift is the drop from this baseline to the current similarity. Re-extracting a memory's
references (an update, a recover) deletes and re-inserts the rows, so their baselines start over.
"""

NAME = "0020_drift_baselines"

SQL = """
ALTER TABLE memory_references ADD COLUMN baseline_similarity REAL;
ALTER TABLE memory_references ADD COLUMN baseline_model TEXT;
ALTER TABLE memory_references ADD COLUMN baseline_document TEXT;
ALTER TABLE memory_references ADD COLUMN baseline_slots TEXT;
ALTER TABLE memory_references ADD COLUMN baseline_at TEXT;
"""
