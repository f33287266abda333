"""0013: memory drift and staleness (docs/drift.md; seeds memory-drift-detection.md and
memory-system-v3-design.md "File Staleness Detection" / "Confidence Propagation").

* ``memory_references``: what a memory refers to, extracted when it is written or updated. ``kind``
  is ``document`` (an ingested document, by id, URL or wiki link), ``file`` (a path relative to the
  memory's project root) or ``entity`` (a knowledge-graph entity). ``raw`` is the text as written,
  ``target`` the resolved key (document id, relative path, entity id). ``stale_at``/``stale_reason``
  mark a file reference whose file is gone.
* ``prediction_errors``: memory-centric signals that a memory no longer matches the world.
  ``error_type`` is ``memory_drift`` (its embedding moved away from the current chunks of a
  referenced document), ``memory_stale_file`` (a referenced file is missing or was deleted),
  ``memory_stale_entity`` (a referenced entity was superseded) or ``memory_external_signal``
  (evidence handed in by a caller: git, issue tracker, ...). ``target`` is the document id, file
  path or entity id the row is about (``''`` for external signals). Open rows have
  ``resolved_at IS NULL``; updating the memory resolves them, forgetting it deletes them.
* ``memory_relations``: memory-to-memory relations along which confidence propagates.
"""

NAME = "0013_drift"

SQL = """
CREATE TABLE memory_references (
    id           INTEGER PRIMARY KEY,
    memory_id    TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    kind         TEXT NOT NULL CHECK (kind IN ('document','file','entity')),
    raw          TEXT NOT NULL,
    target       TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    stale_at     TEXT,
    stale_reason TEXT,
    UNIQUE(memory_id, kind, target)
);
CREATE INDEX idx_memory_references_target ON memory_references(kind, target);

CREATE TABLE prediction_errors (
    error_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    memory_id       TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    target          TEXT NOT NULL DEFAULT '',
    query           TEXT NOT NULL,
    cosine_distance REAL NOT NULL,
    error_type      TEXT NOT NULL CHECK (error_type IN
                      ('memory_drift','memory_external_signal','memory_stale_file','memory_stale_entity')),
    weight          REAL NOT NULL DEFAULT 1.0,
    context         TEXT NOT NULL DEFAULT '{}',
    detected_at     TEXT NOT NULL,
    resolved_at     TEXT
);
CREATE INDEX idx_pred_errors_memory ON prediction_errors(memory_id);
CREATE INDEX idx_pred_errors_type ON prediction_errors(error_type);
CREATE INDEX idx_pred_errors_unresolved ON prediction_errors(resolved_at) WHERE resolved_at IS NULL;

CREATE TABLE memory_relations (
    id         INTEGER PRIMARY KEY,
    source_id  TEXT NOT NULL,
    target_id  TEXT NOT NULL,
    relation   TEXT NOT NULL CHECK (relation IN
                 ('validates','required_with','conflicts_with','supersedes','derived_from')),
    weight     REAL NOT NULL DEFAULT 1.0,
    created_at TEXT NOT NULL,
    UNIQUE(source_id, target_id, relation)
);
CREATE INDEX idx_memory_relations_source ON memory_relations(source_id);
CREATE INDEX idx_memory_relations_target ON memory_relations(target_id);
"""
