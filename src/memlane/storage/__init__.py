"""Storage layer: SQL only, returns frozen dataclasses.

Modules:
    db          connections, the single writer thread and the reader pool.
    migrations  named, ordered schema migrations.
    models      frozen dataclasses (Memory, HistoryEntry, NewMemory, IndexRow).
    memories    SQL for memories, memory_history and the vector-index load.
    embeddings  SQL for the embeddings table.
    fts         FTS5 queries (BM25 leg), with query sanitisation.
    fts_stats   FTS5's own statistics and tokenizer, read for the in-memory bm25 copy.
    jobs        the memory_jobs queue: enqueue (dedup), lease, complete, fail, reap, counts.
    schema      migrations after 0002, one module mNNNN_name.py each (found by migrations.discover).
"""

from memlane.storage.db import Database
from memlane.storage.migrations import migrate

__all__ = ["Database", "migrate"]
