"""0005: the knowledge graph (memory-pipeline-v2.md "Knowledge Graph", "Inline Entity Linker",
"Structural Classification", "Aspect Feedback", "Decision Auto-Protection").

Tables:

* ``entities``: ``name`` (original casing, UNIQUE), ``canonical_name`` (lowercase, whitespace
  collapsed, UNIQUE: the match key), ``entity_type`` (``extracted`` until known), ``mentions``
  (number of memories linked through ``memory_entity_mentions``).
* ``relations``: one row per (source, target, relation_type); ``strength`` 1.0 for pipeline
  relations, ``mentions`` and ``confidence`` (running average) updated on repeats.
* ``memory_entity_mentions``: memory <-> entity links with ``mention_text`` (the raw string
  before canonicalisation) and ``confidence`` in [0, 1]; primary key (memory_id, entity_id) so
  re-processing a memory is idempotent (INSERT OR IGNORE).
* ``entity_aspects``: named facets of an entity, UNIQUE (entity_id, canonical_name), ``weight``
  in [0, 1] (aspect feedback moves it).
* ``entity_attributes``: one fact about an entity, under an aspect once classified (``aspect_id``
  NULL until then), ``kind`` attribute|constraint, ``importance`` 0.5 or 0.85 (decisions).
* ``aspect_feedback_sessions``: ended sessions whose FTS hits were already fed back (the aspect
  feedback worker's bookkeeping; one row per session).
"""

NAME = "0005_knowledge_graph"

SQL = """
CREATE TABLE entities (
    id             TEXT PRIMARY KEY,
    name           TEXT NOT NULL UNIQUE,
    canonical_name TEXT NOT NULL,
    entity_type    TEXT NOT NULL DEFAULT 'extracted',
    description    TEXT,
    mentions       INTEGER NOT NULL DEFAULT 0 CHECK (mentions >= 0),
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL
);
CREATE UNIQUE INDEX idx_entities_canonical ON entities(canonical_name);
CREATE INDEX idx_entities_mentions ON entities(mentions DESC);

CREATE TABLE relations (
    id               TEXT PRIMARY KEY,
    source_entity_id TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    target_entity_id TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    relation_type    TEXT NOT NULL,
    strength         REAL NOT NULL DEFAULT 1.0,
    mentions         INTEGER NOT NULL DEFAULT 1,
    confidence       REAL NOT NULL DEFAULT 0.5 CHECK (confidence BETWEEN 0 AND 1),
    metadata         TEXT NOT NULL DEFAULT '{}',
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    UNIQUE (source_entity_id, target_entity_id, relation_type)
);
CREATE INDEX idx_relations_target ON relations(target_entity_id);

CREATE TABLE memory_entity_mentions (
    memory_id    TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    entity_id    TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    mention_text TEXT,
    confidence   REAL NOT NULL DEFAULT 0.5 CHECK (confidence BETWEEN 0 AND 1),
    created_at   TEXT NOT NULL,
    PRIMARY KEY (memory_id, entity_id)
) WITHOUT ROWID;
CREATE INDEX idx_mentions_entity ON memory_entity_mentions(entity_id, memory_id);

CREATE TABLE entity_aspects (
    id             TEXT PRIMARY KEY,
    entity_id      TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    name           TEXT NOT NULL,
    canonical_name TEXT NOT NULL,
    weight         REAL NOT NULL DEFAULT 0.5 CHECK (weight BETWEEN 0 AND 1),
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    UNIQUE (entity_id, canonical_name)
);
CREATE INDEX idx_aspects_updated ON entity_aspects(updated_at);

CREATE TABLE entity_attributes (
    id                 TEXT PRIMARY KEY,
    entity_id          TEXT NOT NULL REFERENCES entities(id) ON DELETE CASCADE,
    aspect_id          TEXT REFERENCES entity_aspects(id) ON DELETE SET NULL,
    memory_id          TEXT REFERENCES memories(id) ON DELETE CASCADE,
    kind               TEXT NOT NULL DEFAULT 'attribute' CHECK (kind IN ('attribute', 'constraint')),
    content            TEXT NOT NULL,
    normalized_content TEXT NOT NULL,
    confidence         REAL NOT NULL DEFAULT 0.7 CHECK (confidence BETWEEN 0 AND 1),
    importance         REAL NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
    status             TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'superseded', 'deleted')),
    superseded_by      TEXT,
    source             TEXT NOT NULL DEFAULT 'linker',   -- linker | extraction
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL
);
CREATE INDEX idx_attributes_entity ON entity_attributes(entity_id, normalized_content);
CREATE INDEX idx_attributes_aspect ON entity_attributes(aspect_id);
CREATE INDEX idx_attributes_memory ON entity_attributes(memory_id);

CREATE TABLE aspect_feedback_sessions (
    session_key   TEXT PRIMARY KEY,
    confirmations INTEGER NOT NULL DEFAULT 0,
    aspects       INTEGER NOT NULL DEFAULT 0,
    applied_at    TEXT NOT NULL
);
"""
