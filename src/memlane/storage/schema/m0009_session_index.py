"""0009: drop ``idx_session_memories_session``, a prefix of the UNIQUE (session_key, memory_id) index.

Every session-start inserts its whole candidate pool (~50-100 rows) into ``session_memories``;
each row updated three indexes, one of them redundant: the UNIQUE constraint's index already
serves every ``WHERE session_key = ?`` lookup (SQLite uses an index's leading column). Measured
on a copy of a 4,000-memory store with 40,000 candidate rows (one 90-row start): the insert
took 3.49 ms p50 / 7.98 p95 with the index, 3.24 / 4.31 without.
"""

NAME = "0009_session_index"

SQL = """
DROP INDEX IF EXISTS idx_session_memories_session;
"""
