"""0006: document ingest (memory-pipeline-v2.md "Document Ingest").

* ``documents``: one ingested document. ``source_type`` is ``url`` (content fetched over HTTP)
  or ``text`` (``raw_content`` given by the caller; a fetched body is stored there too, so a
  retry does not fetch again). ``status`` moves ``queued -> fetching -> chunking -> embedding
  -> done`` or ends ``failed`` with ``error``; a retried attempt goes back to ``queued``.
  ``deleted_at`` marks a soft-deleted document (its chunk memories are soft-deleted with it).
* ``document_memories``: which memory holds chunk ``chunk_index`` of a document; lets the
  chunks be listed or deleted as a unit. A memory may back chunks of several documents (the
  same chunk text is stored once, by content hash).
"""

NAME = "0006_documents"

SQL = """
CREATE TABLE documents (
    id            TEXT PRIMARY KEY,                  -- UUID4
    source_type   TEXT NOT NULL CHECK (source_type IN ('url', 'text')),
    source_url    TEXT,
    title         TEXT,
    raw_content   TEXT,
    content_type  TEXT,
    byte_length   INTEGER,                           -- bytes of the fetched or given content
    project       TEXT,
    tags          TEXT NOT NULL DEFAULT '[]',        -- JSON array of strings
    status        TEXT NOT NULL DEFAULT 'queued'
                  CHECK (status IN ('queued', 'fetching', 'chunking', 'embedding', 'done', 'failed')),
    error         TEXT,
    attempts      INTEGER NOT NULL DEFAULT 0,
    chunk_count   INTEGER NOT NULL DEFAULT 0,        -- chunks the content was split into
    job_id        INTEGER,                           -- the document_ingest job in memory_jobs
    created_at    TEXT NOT NULL,                     -- ISO-8601 UTC, ms, 'Z'
    updated_at    TEXT NOT NULL,
    completed_at  TEXT,
    deleted_at    TEXT
);
CREATE INDEX idx_documents_created ON documents(created_at);
CREATE INDEX idx_documents_status ON documents(status);

CREATE TABLE document_memories (
    document_id TEXT NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    memory_id   TEXT NOT NULL REFERENCES memories(id) ON DELETE CASCADE,
    chunk_index INTEGER NOT NULL,
    created_at  TEXT NOT NULL,
    PRIMARY KEY (document_id, chunk_index)
);
CREATE INDEX idx_document_memories_memory ON document_memories(memory_id);
"""
