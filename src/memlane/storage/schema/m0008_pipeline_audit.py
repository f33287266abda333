"""0008: the pipeline's audit events in ``memory_history`` (memory-pipeline-v2.md "Controlled Writes").

``memory_history.event`` had a CHECK of the five remember/update events. The pipeline records
every proposal in every outcome (``proposal``), one summary per extraction job
(``extraction``) and the supersession of an old memory by a newer fact (``superseded``).
SQLite cannot alter a CHECK, so the table is rebuilt (same columns, ids kept) with the wider
list; the index is recreated. Nothing references ``memory_history``, so the rebuild is safe
with ``foreign_keys=ON``.
"""

NAME = "0008_pipeline_audit"

SQL = """
CREATE TABLE memory_history_0008 (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_id   TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    event       TEXT NOT NULL CHECK (event IN ('created','updated','deleted','recovered','deduplicated',
                                               'superseded','proposal','extraction')),
    old_content TEXT,
    new_content TEXT,
    changes     TEXT NOT NULL DEFAULT '{}',
    who         TEXT,
    why         TEXT,
    created_at  TEXT NOT NULL
);
INSERT INTO memory_history_0008 (id, memory_id, event, old_content, new_content, changes, who, why, created_at)
    SELECT id, memory_id, event, old_content, new_content, changes, who, why, created_at FROM memory_history;
DROP TABLE memory_history;
ALTER TABLE memory_history_0008 RENAME TO memory_history;
CREATE INDEX idx_history_memory ON memory_history(memory_id, id);
"""
