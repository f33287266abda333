"""0012: partial indexes behind the dashboard's session page and memory card.

* ``memories(source_id)``: the memories recorded in a session (``source_id`` = its key) and the
  pipeline's memories derived from them (``source_id`` = the source memory's id), for the
  session-end review and the session timeline. Without it each is a scan of the whole table.
* ``memory_jobs(session_key)``: a session's jobs for its timeline (a scan of every job).
* ``memories(superseded_by)``: the memories a memory replaced, for its supersede chain.

All three are partial (``IS NOT NULL``): most memories have no ``superseded_by``.
"""

NAME = "0012_dashboard_indexes"

SQL = """
CREATE INDEX IF NOT EXISTS idx_memories_source ON memories(source_id) WHERE source_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_jobs_session ON memory_jobs(session_key) WHERE session_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_memories_superseded ON memories(superseded_by) WHERE superseded_by IS NOT NULL;
"""
