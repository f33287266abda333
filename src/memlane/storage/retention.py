"""SQL of the retention sweep (memory-pipeline-v2.md "Retention Worker").

Each function is one step, runs inside the caller's write transaction and touches at most
``limit`` rows. Cut-offs are ISO-8601 UTC strings (rows strictly older are purged).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence


def _table_exists(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone() is not None


def expired_tombstones(conn: sqlite3.Connection, cutoff: str, limit: int) -> list[str]:
    """Ids of up to ``limit`` soft-deleted memories deleted before ``cutoff``, oldest first.

    A tombstone another memory names in ``superseded_by`` is kept (the link would dangle)."""
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT id FROM memories WHERE is_deleted = 1 AND deleted_at IS NOT NULL AND deleted_at < ? "
            "ORDER BY deleted_at, seq LIMIT ?",
            (cutoff, int(limit)),
        )
    ]
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    named = {r[0] for r in conn.execute(f"SELECT superseded_by FROM memories WHERE superseded_by IN ({marks})", ids)}
    return [i for i in ids if i not in named]


def purge_graph_links(conn: sqlite3.Connection, memory_ids: Sequence[str]) -> dict[str, int]:
    """Step 1: delete the ``memory_entity_mentions`` rows of ``memory_ids``, decrement
    ``entities.mentions``, delete entities left with no mention (their relations go by cascade,
    and are deleted explicitly too). No-op without the knowledge-graph tables.

    Returns:
        ``{"mentions": n, "entities": n, "relations": n}`` deleted.
    """
    out = {"mentions": 0, "entities": 0, "relations": 0}
    if not memory_ids or not _table_exists(conn, "memory_entity_mentions"):
        return out
    marks = ",".join("?" * len(memory_ids))
    counts = conn.execute(
        f"SELECT entity_id, count(*) FROM memory_entity_mentions WHERE memory_id IN ({marks}) GROUP BY entity_id",
        list(memory_ids),
    ).fetchall()
    out["mentions"] = conn.execute(
        f"DELETE FROM memory_entity_mentions WHERE memory_id IN ({marks})", list(memory_ids)
    ).rowcount
    if not counts or not _table_exists(conn, "entities"):
        return out
    conn.executemany(
        "UPDATE entities SET mentions = max(0, mentions - ?) WHERE id = ?", [(int(n), e) for e, n in counts]
    )
    touched = [e for e, _ in counts]
    emarks = ",".join("?" * len(touched))
    orphans = [
        r[0]
        for r in conn.execute(
            f"SELECT id FROM entities WHERE id IN ({emarks}) AND mentions = 0 AND NOT EXISTS "
            "(SELECT 1 FROM memory_entity_mentions x WHERE x.entity_id = entities.id)",
            touched,
        )
    ]
    if not orphans:
        return out
    omarks = ",".join("?" * len(orphans))
    if _table_exists(conn, "relations"):
        out["relations"] = conn.execute(
            f"DELETE FROM relations WHERE source_entity_id IN ({omarks}) OR target_entity_id IN ({omarks})",
            orphans + orphans,
        ).rowcount
    out["entities"] = conn.execute(f"DELETE FROM entities WHERE id IN ({omarks})", orphans).rowcount
    return out


def purge_embeddings(conn: sqlite3.Connection, memory_ids: Sequence[str]) -> int:
    """Step 2: delete the vectors (every model) of these memories' content and context hashes
    that no other memory uses. Returns rows deleted."""
    if not memory_ids:
        return 0
    marks = ",".join("?" * len(memory_ids))
    hashes = {
        h
        for r in conn.execute(
            f"SELECT content_hash, context_hash FROM memories WHERE id IN ({marks})", list(memory_ids)
        )
        for h in r
        if h
    }
    if not hashes:
        return 0
    purged, hl = set(memory_ids), list(hashes)
    hmarks = ",".join("?" * len(hl))
    used: set[str] = set()
    for mid, ch, xh in conn.execute(
        f"SELECT id, content_hash, context_hash FROM memories WHERE content_hash IN "
        f"({hmarks}) OR context_hash IN ({hmarks})",
        hl + hl,
    ):
        if mid not in purged:
            used.update(h for h in (ch, xh) if h)
    free = [h for h in hl if h not in used]
    n = 0
    for start in range(0, len(free), 500):
        part = free[start : start + 500]
        n += conn.execute(f"DELETE FROM embeddings WHERE content_hash IN ({','.join('?' * len(part))})", part).rowcount
    return n


def purge_memories(conn: sqlite3.Connection, memory_ids: Sequence[str]) -> int:
    """Step 3: hard-delete these memories (FTS by the ``memories_fts_ad`` trigger; history, links
    and session rows by cascade). A row a foreign key still needs is skipped. Returns rows deleted."""
    n = 0
    for mid in memory_ids:
        try:
            n += conn.execute("DELETE FROM memories WHERE id = ? AND is_deleted = 1", (mid,)).rowcount
        except sqlite3.IntegrityError:  # referenced without ON DELETE CASCADE: keep it
            continue
    return n


def purge_history(conn: sqlite3.Connection, cutoff: str, limit: int) -> int:
    """Step 4: delete up to ``limit`` ``memory_history`` rows created before ``cutoff``."""
    return conn.execute(
        "DELETE FROM memory_history WHERE id IN (SELECT id FROM memory_history WHERE created_at < ? "
        "ORDER BY id LIMIT ?)",
        (cutoff, int(limit)),
    ).rowcount


def purge_jobs(conn: sqlite3.Connection, status: str, cutoff: str, limit: int) -> int:
    """Steps 5 and 6: delete up to ``limit`` jobs of ``status`` (``completed`` or ``dead``) whose
    last update (completion or final failure) is before ``cutoff``."""
    return conn.execute(
        "DELETE FROM memory_jobs WHERE id IN (SELECT id FROM memory_jobs WHERE status = ? "
        "AND updated_at < ? ORDER BY id LIMIT ?)",
        (status, cutoff, int(limit)),
    ).rowcount


def purge_documents(conn: sqlite3.Connection, cutoff: str, limit: int) -> int:
    """Step 7: hard-delete up to ``limit`` documents soft-deleted before ``cutoff`` (their
    ``document_memories`` links by cascade). No-op without the documents table."""
    if not _table_exists(conn, "documents"):
        return 0
    return conn.execute(
        "DELETE FROM documents WHERE id IN (SELECT id FROM documents WHERE deleted_at IS NOT NULL "
        "AND deleted_at < ? ORDER BY deleted_at LIMIT ?)",
        (cutoff, int(limit)),
    ).rowcount


def still_expired(conn: sqlite3.Connection, ids: Sequence[str], cutoff: str) -> list[str]:
    """The ids of ``ids`` still soft-deleted before ``cutoff`` (one may have been recovered
    meanwhile), in the order given."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    ok = {
        r[0]
        for r in conn.execute(
            f"SELECT id FROM memories WHERE id IN ({marks}) AND is_deleted = 1 AND deleted_at < ?", (*ids, cutoff)
        )
    }
    return [i for i in ids if i in ok]
