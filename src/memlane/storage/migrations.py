"""Named, ordered schema migrations, recorded in ``schema_migrations``.

Each migration is a (name, SQL script) pair applied once, in list order, inside the
writer's transaction. Never edit a shipped migration: append a new one. 0001 and 0002 are
built in; later ones are modules ``memlane.storage.schema.mNNNN_xxx`` (``NAME``, ``SQL``)
found by :func:`discover` and appended sorted by module name.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import sqlite3
from datetime import UTC, datetime

from memlane.errors import StorageError
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

_0002_sessions = """
CREATE TABLE sessions (
    session_key     TEXT PRIMARY KEY,
    project         TEXT,
    harness         TEXT,
    cwd             TEXT,
    context         TEXT,            -- text the similarity pre-filter embedded
    started_at      TEXT NOT NULL,
    ended_at        TEXT,
    status          TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'ended')),
    started         INTEGER NOT NULL DEFAULT 0,  -- 1 once a session-start recorded its candidates
    prompt_count    INTEGER NOT NULL DEFAULT 0,
    candidate_count INTEGER NOT NULL DEFAULT 0,
    injected_count  INTEGER NOT NULL DEFAULT 0,
    predictor_state TEXT NOT NULL DEFAULT 'collecting'
);
CREATE INDEX idx_sessions_project ON sessions(project, started_at);

-- predictive-memory-scorer.md "Phase 0": one row per candidate of a session.
CREATE TABLE session_memories (
    id                    INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key           TEXT NOT NULL REFERENCES sessions(session_key) ON DELETE CASCADE,
    memory_id             TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    source                TEXT NOT NULL CHECK (source IN ('effective', 'predictor', 'both', 'exploration',
                                                          'fts_only')),
    effective_score       REAL,      -- importance x 0.95^days (pinned = 1.0)
    similarity            REAL,      -- cosine(session context, memory), when both have vectors
    predictor_score       REAL,      -- null until the predictor scores
    final_score           REAL NOT NULL,
    rank                  INTEGER NOT NULL,   -- position in the final (diversity-adjusted) ranking
    baseline_rank         INTEGER,
    predictor_rank        INTEGER,
    was_injected          INTEGER NOT NULL,
    relevance_score       REAL,      -- continuity scorer, per memory
    fts_hit_count         INTEGER NOT NULL DEFAULT 0,
    agent_relevance_score REAL,      -- running mean of agent feedback in [-1, 1]
    agent_feedback_count  INTEGER NOT NULL DEFAULT 0,
    agent_preference      TEXT,
    raw_label             REAL,      -- base label before behavioural adjustments
    label                 REAL,      -- final training label
    label_reason          TEXT,      -- JSON list of the rules applied
    created_at            TEXT NOT NULL,
    UNIQUE (session_key, memory_id)
);
CREATE INDEX idx_session_memories_session ON session_memories(session_key);
CREATE INDEX idx_session_memories_memory ON session_memories(memory_id);

CREATE TABLE session_scores (
    session_key          TEXT PRIMARY KEY REFERENCES sessions(session_key) ON DELETE CASCADE,
    score                REAL NOT NULL,
    confidence           REAL NOT NULL,
    memories_recalled    INTEGER NOT NULL DEFAULT 0,
    memories_used        INTEGER NOT NULL DEFAULT 0,
    novel_context_count  INTEGER NOT NULL DEFAULT 0,
    reasoning            TEXT,
    continuity_reasoning TEXT,
    scorer               TEXT NOT NULL CHECK (scorer IN ('llm', 'behavioral')),
    model                TEXT,
    created_at           TEXT NOT NULL
);

-- memory-pipeline-v2.md "Lossless Session Transcripts".
CREATE TABLE session_transcripts (
    session_key TEXT PRIMARY KEY,
    content     TEXT NOT NULL,
    harness     TEXT,
    project     TEXT,
    agent_id    TEXT,
    created_at  TEXT NOT NULL
);
CREATE INDEX idx_transcripts_project ON session_transcripts(project, created_at);

-- memory-pipeline-v2.md "Session Checkpoints".
CREATE TABLE session_checkpoints (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key        TEXT NOT NULL,
    harness            TEXT,
    project            TEXT,
    project_normalized TEXT,
    trigger            TEXT NOT NULL CHECK (trigger IN ('periodic', 'pre_compaction', 'session_end',
                                                        'agent', 'explicit')),
    digest             TEXT NOT NULL,
    prompt_count       INTEGER NOT NULL DEFAULT 0,
    memory_queries     TEXT NOT NULL DEFAULT '[]',
    recent_remembers   TEXT NOT NULL DEFAULT '[]',
    created_at         TEXT NOT NULL
);
CREATE INDEX idx_checkpoints_session ON session_checkpoints(session_key, created_at);
CREATE INDEX idx_checkpoints_project ON session_checkpoints(project_normalized, created_at);

-- The durable job queue (memory-pipeline-v2.md "Worker Model").
CREATE TABLE memory_jobs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    job_type     TEXT NOT NULL,
    dedup_key    TEXT,
    memory_id    TEXT,
    session_key  TEXT,
    payload      TEXT NOT NULL DEFAULT '{}',
    status       TEXT NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'leased', 'completed', 'failed', 'dead', 'skipped')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 3,
    leased_until TEXT,
    run_after    TEXT,
    error        TEXT,
    result       TEXT,
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE UNIQUE INDEX idx_jobs_dedup ON memory_jobs(job_type, dedup_key)
    WHERE dedup_key IS NOT NULL AND status IN ('pending', 'leased');
CREATE INDEX idx_jobs_status ON memory_jobs(status, job_type, run_after);
"""

BUILTIN: list[tuple[str, str]] = [
    ("0001_memories_embeddings_fts_history", _0001_memories),
    ("0002_sessions_scores_transcripts_checkpoints_jobs", _0002_sessions),
]

_MODULE_NAME = re.compile(r"^m(\d{4})_\w+$")


def discover(package: str = "memlane.storage.schema") -> list[tuple[str, str]]:
    """The migrations defined as modules of ``package``, sorted by module name.

    Each module ``mNNNN_xxx`` defines ``NAME: str`` (starting with ``NNNN_``) and ``SQL: str``;
    this lets several migrations be added without touching this file. Modules whose name does
    not match ``mNNNN_*`` are ignored (helpers).

    Raises:
        StorageError: a module lacks NAME/SQL, its NAME does not start with its number, or two
            modules share a NAME.
    """
    pkg = importlib.import_module(package)
    found: list[tuple[str, str]] = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        m = _MODULE_NAME.match(info.name)
        if not m:
            continue
        mod = importlib.import_module(f"{package}.{info.name}")
        name, sql = getattr(mod, "NAME", None), getattr(mod, "SQL", None)
        if not isinstance(name, str) or not isinstance(sql, str):
            raise StorageError(f"migration module {info.name}: must define NAME: str and SQL: str")
        if not name.startswith(m.group(1) + "_"):
            raise StorageError(f"migration module {info.name}: NAME {name!r} must start with {m.group(1)}_")
        found.append((name, sql))
    names = [n for n, _ in BUILTIN + found]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise StorageError(f"duplicate migration names: {', '.join(dup)}")
    return found


MIGRATIONS: list[tuple[str, str]] = BUILTIN + discover()


def applied(conn: sqlite3.Connection) -> list[str]:
    """Names of the migrations already applied, in order."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)")
    return [r[0] for r in conn.execute("SELECT name FROM schema_migrations ORDER BY rowid")]


def migrate(db: Database) -> list[str]:
    """Apply every pending migration in order; returns the names applied now."""

    def job(conn: sqlite3.Connection) -> list[str]:
        done = set(applied(conn))
        now = datetime.now(UTC).isoformat()
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
