"""0007: prospective hints (memory-pipeline-v2.md "Prospective Indexing (Hints)").

``memory_hints`` holds the hypothetical future queries the hints worker generated for a memory
(one row per hint, linked by ``memory_id``); ``memory_hints_fts`` is its own FTS5 index (same
tokenizer as ``memories_fts``), kept in step by triggers like ``memories_fts``.
"""

NAME = "0007_memory_hints"

SQL = """
CREATE TABLE memory_hints (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,   -- the FTS rowid
    memory_id  TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    hint       TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE INDEX idx_memory_hints_memory ON memory_hints(memory_id);

CREATE VIRTUAL TABLE memory_hints_fts USING fts5(
    hint,
    content='memory_hints', content_rowid='id',
    tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memory_hints_fts_ai AFTER INSERT ON memory_hints BEGIN
    INSERT INTO memory_hints_fts(rowid, hint) VALUES (new.id, new.hint);
END;
CREATE TRIGGER memory_hints_fts_ad AFTER DELETE ON memory_hints BEGIN
    INSERT INTO memory_hints_fts(memory_hints_fts, rowid, hint) VALUES ('delete', old.id, old.hint);
END;
CREATE TRIGGER memory_hints_fts_au AFTER UPDATE OF hint ON memory_hints BEGIN
    INSERT INTO memory_hints_fts(memory_hints_fts, rowid, hint) VALUES ('delete', old.id, old.hint);
    INSERT INTO memory_hints_fts(rowid, hint) VALUES (new.id, new.hint);
END;
"""
