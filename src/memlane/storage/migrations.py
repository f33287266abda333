"""Named, ordered schema migrations, recorded in ``schema_migrations``.

Each migration is a (name, SQL script) pair applied once, in list order, inside the
writer's transaction. Never edit a shipped migration: append a new one.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone

from memlane.storage.db import Database

_0001_memories = """
CREATE TABLE memories (
    seq               INTEGER PRIMARY KEY AUTOINCREMENT,  -- stable FTS rowid
    id                TEXT NOT NULL UNIQUE,               -- UUID4
    type              TEXT NOT NULL DEFAULT 'fact',
    content           TEXT NOT NULL,
    normalized_content TEXT NOT NULL,
    content_hash      TEXT NOT NULL,
    context           TEXT,          -- surrounding text indexed with the memory, not part of it
    context_hash      TEXT,          -- hash of the context-embedding text (embeddings key)
    importance        REAL NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    confidence        REAL NOT NULL DEFAULT 1.0 CHECK (confidence BETWEEN 0 AND 1),
    project           TEXT,
    tags              TEXT NOT NULL DEFAULT '[]',   -- JSON array of strings
    metadata          TEXT NOT NULL DEFAULT '{}',   -- JSON object
    who               TEXT,
    why               TEXT,
    source_type       TEXT,
    source_id         TEXT,
    created_at        TEXT NOT NULL,  -- ISO-8601 UTC, millisecond precision, 'Z'
    updated_at        TEXT NOT NULL,
    last_accessed     TEXT,
    access_count      INTEGER NOT NULL DEFAULT 0,
    pinned            INTEGER NOT NULL DEFAULT 0,
    is_deleted        INTEGER NOT NULL DEFAULT 0,
    deleted_at        TEXT,
    superseded_by     TEXT REFERENCES memories(id),
    embedding_model   TEXT,
    extraction_status TEXT NOT NULL DEFAULT 'none'
);
CREATE UNIQUE INDEX idx_memories_hash_live ON memories(content_hash) WHERE is_deleted = 0;
CREATE INDEX idx_memories_project ON memories(project, is_deleted);
CREATE INDEX idx_memories_created ON memories(created_at);
CREATE INDEX idx_memories_type ON memories(type);

CREATE TABLE embeddings (
    content_hash TEXT NOT NULL,
    model        TEXT NOT NULL,
    dimensions   INTEGER NOT NULL CHECK (dimensions > 0),
    vector       BLOB NOT NULL,     -- float32 little-endian, dimensions * 4 bytes
    created_at   TEXT NOT NULL,
    PRIMARY KEY (content_hash, model)
);

CREATE VIRTUAL TABLE memories_fts USING fts5(
    normalized_content, context,
    content='memories', content_rowid='seq',
    tokenize='porter unicode61 remove_diacritics 2'
);
CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, normalized_content, context)
    VALUES (new.seq, new.normalized_content, coalesce(new.context, ''));
END;
CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, normalized_content, context)
    VALUES ('delete', old.seq, old.normalized_content, coalesce(old.context, ''));
END;
CREATE TRIGGER memories_fts_au AFTER UPDATE OF normalized_content, context ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, normalized_content, context)
    VALUES ('delete', old.seq, old.normalized_content, coalesce(old.context, ''));
    INSERT INTO memories_fts(rowid, normalized_content, context)
    VALUES (new.seq, new.normalized_content, coalesce(new.context, ''));
END;

CREATE TABLE memory_history (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_id   TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    event       TEXT NOT NULL CHECK (event IN ('created','updated','deleted','recovered','deduplicated')),
    old_content TEXT,
    new_content TEXT,
    changes     TEXT NOT NULL DEFAULT '{}',   -- JSON: field -> [old, new]
    who         TEXT,
    why         TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX idx_history_memory ON memory_history(memory_id, id);
"""

MIGRATIONS: list[tuple[str, str]] = [
    ("0001_memories_embeddings_fts_history", _0001_memories),
]


def applied(conn: sqlite3.Connection) -> list[str]:
    """Names of the migrations already applied, in order."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
    )
    return [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY rowid")]


def migrate(db: Database) -> list[str]:
    """Apply every pending migration in order; returns the names applied now."""

    def job(conn: sqlite3.Connection) -> list[str]:
        done = set(applied(conn))
        now = datetime.now(timezone.utc).isoformat()
        ran = []
        for name, script in MIGRATIONS:
            if name in done:
                continue
            for statement in _split(script):
                conn.execute(statement)
            conn.execute("INSERT INTO schema_migrations(name, applied_at) VALUES (?, ?)", (name, now))
            ran.append(name)
        return ran

    return db.write(job)


def _split(script: str) -> list[str]:
    """Split a script into statements, keeping trigger bodies whole (sqlite3.complete_statement)."""
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            if buf.strip():
                out.append(buf.strip())
            buf = ""
    if buf.strip():
        out.append(buf.strip())
    return out
