"""0014: the V3 memory schema (docs/v3.md; seed memory-system-v3-design.md sections 4 and 11).

Columns added to ``memories`` (every existing row keeps its content, id and seq; the defaults
describe it: a ``global`` memory written by an agent, not under review):

* ``scope``: ``global`` | ``module`` | ``work_unit`` | ``session``.
* ``source``: ``agent_explicit`` | ``observer_inferred`` | ``qa_auto`` | ``mcp_auto`` |
  ``commit_auto`` | ``user_taught``.
* ``work_unit_ref`` (JSON ``{"methodology", "hierarchy": [...], "label"}``) and ``methodology``
  (denormalised from it for indexing).
* ``related_files``, ``related_modules``: JSON arrays of strings.
* ``needs_review``, ``user_verified``: 0/1.
* ``citation_text``, ``commit_sha``, ``decay_half_life_days``, ``stale_at``.
* ``type_fields``: JSON object of the type's extended fields (dead_end's ``approach_tried``...),
  validated per type by :mod:`memlane.v3.model`.

Memory-to-memory relations live in ``memory_relations`` (migration 0013).

The co-access graph (seed section 5 "Co-Access Graph"): ``coaccess_files`` counts, per project,
how often a file was accessed (in sessions) or changed (in commits); ``coaccess_edges`` holds both
directions of each pair with the seed's edge fields (weight, raw count, mean time delta,
directional, last observed) plus ``score``, the size-discounted co-change sum the predictor ranks by,
and ``origin`` (``git`` or ``session``: who last fed it).
"""

NAME = "0014_v3_schema"

SQL = """
ALTER TABLE memories ADD COLUMN scope TEXT NOT NULL DEFAULT 'global'
    CHECK (scope IN ('global','module','work_unit','session'));
ALTER TABLE memories ADD COLUMN source TEXT NOT NULL DEFAULT 'agent_explicit'
    CHECK (source IN ('agent_explicit','observer_inferred','qa_auto','mcp_auto','commit_auto','user_taught'));
ALTER TABLE memories ADD COLUMN work_unit_ref TEXT;
ALTER TABLE memories ADD COLUMN methodology TEXT;
ALTER TABLE memories ADD COLUMN related_files TEXT NOT NULL DEFAULT '[]';
ALTER TABLE memories ADD COLUMN related_modules TEXT NOT NULL DEFAULT '[]';
ALTER TABLE memories ADD COLUMN needs_review INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memories ADD COLUMN user_verified INTEGER NOT NULL DEFAULT 0;
ALTER TABLE memories ADD COLUMN citation_text TEXT;
ALTER TABLE memories ADD COLUMN commit_sha TEXT;
ALTER TABLE memories ADD COLUMN decay_half_life_days REAL;
ALTER TABLE memories ADD COLUMN stale_at TEXT;
ALTER TABLE memories ADD COLUMN type_fields TEXT NOT NULL DEFAULT '{}';

CREATE INDEX idx_memories_scope ON memories(scope);
CREATE INDEX idx_memories_v3_source ON memories(source);
CREATE INDEX idx_memories_methodology ON memories(methodology) WHERE methodology IS NOT NULL;
CREATE INDEX idx_memories_commit ON memories(commit_sha) WHERE commit_sha IS NOT NULL;
CREATE INDEX idx_memories_needs_review ON memories(needs_review) WHERE needs_review = 1;

CREATE TABLE coaccess_files (
    project          TEXT NOT NULL DEFAULT '',
    file_path        TEXT NOT NULL,
    access_count     INTEGER NOT NULL DEFAULT 0,  -- sessions that accessed it
    commit_count     INTEGER NOT NULL DEFAULT 0,  -- commits that changed it
    last_accessed_at TEXT NOT NULL,
    PRIMARY KEY (project, file_path)
);

CREATE TABLE coaccess_edges (
    project           TEXT NOT NULL DEFAULT '',
    file_a            TEXT NOT NULL,
    file_b            TEXT NOT NULL,
    weight            REAL NOT NULL DEFAULT 0.0,   -- raw_count / appearances of file_a, in [0, 1]
    raw_count         INTEGER NOT NULL DEFAULT 0,  -- commits or sessions with both
    score             REAL NOT NULL DEFAULT 0.0,   -- sum over them of 1 / (files in it - 1)
    avg_time_delta_ms REAL,                        -- sessions only: mean ms from a to b
    directional       INTEGER NOT NULL DEFAULT 0,  -- a almost always precedes b
    origin            TEXT NOT NULL DEFAULT 'git' CHECK (origin IN ('git','session')),
    last_observed_at  TEXT NOT NULL,
    PRIMARY KEY (project, file_a, file_b)
) WITHOUT ROWID;
"""
