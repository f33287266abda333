"""0009: drop ``idx_session_memories_session``, a prefix of the UNIQUE (session_key, memory_id) index.

Every session-start inserts its whole candidate pool (~50-100 rows) into ``session_memories``;
each row updated three indexes, one of them redundant: the UNIQUE constraint's index already
serves every ``WHERE session_key = ?`` lookup (SQLite uses an index's leading column), so the
third index only slowed the insert (docs/decisions.md, "Session-start writes").
"""

NAME = "0009_session_index"

SQL = """
DROP INDEX IF EXISTS idx_session_memories_session;
"""
