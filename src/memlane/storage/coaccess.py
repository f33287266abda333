"""SQL for the co-access graph (``coaccess_files``, ``coaccess_edges``; migration 0014).

Every edge is stored in both directions (``a -> b`` and ``b -> a``) so a file's neighbours are one
range of the primary key. Functions that write take the caller's connection inside a write
transaction (``Database.write``); reads take any connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence


def add_commit(
    conn: sqlite3.Connection, project: str, files: Sequence[str], *, at: str, max_pair_files: int, origin: str = "git"
) -> None:
    """Count one commit (or one session) that touched ``files`` (distinct paths).

    Each file's ``commit_count`` (``origin='git'``) or ``access_count`` (``'session'``) goes up by
    one. When 2 <= len(files) <= ``max_pair_files``, every ordered pair's ``raw_count`` goes up by
    one and its ``score`` by ``1 / (len(files) - 1)`` (a file changed with many others says less
    about each of them); ``weight`` becomes ``raw_count / appearances of file_a``, capped at 1.
    """
    col = "commit_count" if origin == "git" else "access_count"
    conn.executemany(
        f"""INSERT INTO coaccess_files (project, file_path, {col}, last_accessed_at) VALUES (?, ?, 1, ?)
            ON CONFLICT(project, file_path) DO UPDATE SET {col} = {col} + 1, last_accessed_at = excluded.last_accessed_at""",
        [(project, f, at) for f in files],
    )
    if 2 <= len(files) <= max_pair_files:
        inc = 1.0 / (len(files) - 1)
        conn.executemany(
            """INSERT INTO coaccess_edges (project, file_a, file_b, raw_count, score, origin, last_observed_at)
               VALUES (?, ?, ?, 1, ?, ?, ?)
               ON CONFLICT(project, file_a, file_b) DO UPDATE SET raw_count = raw_count + 1,
                   score = score + excluded.score, origin = excluded.origin, last_observed_at = excluded.last_observed_at""",
            [(project, a, b, inc, origin, at) for a in files for b in files if a != b],
        )
    # every file's appearances went up: its edges' weights follow, with or without new pairs
    conn.executemany(
        """UPDATE coaccess_edges SET weight = min(1.0, raw_count * 1.0 /
               (SELECT max(1, commit_count + access_count) FROM coaccess_files f
                WHERE f.project = coaccess_edges.project AND f.file_path = coaccess_edges.file_a))
           WHERE project = ? AND file_a = ?""",
        [(project, a) for a in files],
    )


def rename(conn: sqlite3.Connection, project: str, old: str, new: str) -> None:
    """Move ``old``'s counts and edges to ``new`` (merged into whatever ``new`` already has)."""
    if old == new:
        return
    conn.execute(
        """INSERT INTO coaccess_files (project, file_path, access_count, commit_count, last_accessed_at)
           SELECT project, ?, access_count, commit_count, last_accessed_at FROM coaccess_files
           WHERE project = ? AND file_path = ?
           ON CONFLICT(project, file_path) DO UPDATE SET access_count = access_count + excluded.access_count,
               commit_count = commit_count + excluded.commit_count""",
        (new, project, old),
    )
    conn.execute("DELETE FROM coaccess_files WHERE project = ? AND file_path = ?", (project, old))
    for col, other in (("file_a", "file_b"), ("file_b", "file_a")):
        conn.execute(
            f"""INSERT INTO coaccess_edges (project, file_a, file_b, weight, raw_count, score, avg_time_delta_ms,
                    directional, origin, last_observed_at)
                SELECT project, {"?" if col == "file_a" else "file_a"}, {"?" if col == "file_b" else "file_b"},
                       weight, raw_count, score, avg_time_delta_ms, directional, origin, last_observed_at
                FROM coaccess_edges WHERE project = ? AND {col} = ? AND {other} != ?
                ON CONFLICT(project, file_a, file_b) DO UPDATE SET raw_count = raw_count + excluded.raw_count,
                    score = score + excluded.score, weight = max(weight, excluded.weight)""",
            (new, project, old, new),
        )
        conn.execute(f"DELETE FROM coaccess_edges WHERE project = ? AND {col} = ?", (project, old))


def remove(conn: sqlite3.Connection, project: str, path: str) -> None:
    """Forget a deleted file: its counts and every edge touching it."""
    conn.execute("DELETE FROM coaccess_files WHERE project = ? AND file_path = ?", (project, path))
    conn.execute("DELETE FROM coaccess_edges WHERE project = ? AND (file_a = ? OR file_b = ?)", (project, path, path))


def neighbours(
    conn: sqlite3.Connection, project: str, path: str, limit: int, suffix: str = ""
) -> list[tuple[str, float, int, float]]:
    """``(file, score, raw_count, weight)`` of ``path``'s neighbours (whose name ends with
    ``suffix``), highest score first."""
    return [
        (r[0], float(r[1]), int(r[2]), float(r[3]))
        for r in conn.execute(
            """SELECT file_b, score, raw_count, weight FROM coaccess_edges WHERE project = ? AND file_a = ?
               AND (? = '' OR substr(file_b, -length(?)) = ?)
           ORDER BY score DESC, raw_count DESC, file_b LIMIT ?""",
            (project, path, suffix, suffix, suffix, limit),
        )
    ]


def popular(conn: sqlite3.Connection, project: str, directory: str | None, limit: int, suffix: str = "") -> list[str]:
    """The project's files (whose name ends with ``suffix``) most often changed or accessed; with
    ``directory`` (``''`` = the root) only the files directly in it."""
    cond = "(? = '' OR substr(file_path, -length(?)) = ?)"
    if directory is None:
        rows = conn.execute(
            f"""SELECT file_path FROM coaccess_files WHERE project = ? AND {cond}
               ORDER BY commit_count + access_count DESC, file_path LIMIT ?""",
            (project, suffix, suffix, suffix, limit),
        )
    else:
        prefix = directory + "/" if directory else ""
        rows = conn.execute(
            f"""SELECT file_path FROM coaccess_files WHERE project = ? AND substr(file_path, 1, ?) = ?
                   AND instr(substr(file_path, ? + 1), '/') = 0 AND {cond}
               ORDER BY commit_count + access_count DESC, file_path LIMIT ?""",
            (project, len(prefix), prefix, len(prefix), suffix, suffix, suffix, limit),
        )
    return [r[0] for r in rows]


def stats(conn: sqlite3.Connection, project: str) -> dict[str, int]:
    """Files and directed edges stored for ``project``."""
    files = conn.execute("SELECT count(*) FROM coaccess_files WHERE project = ?", (project,)).fetchone()[0]
    edges = conn.execute("SELECT count(*) FROM coaccess_edges WHERE project = ?", (project,)).fetchone()[0]
    return {"files": int(files), "edges": int(edges)}


def clear(conn: sqlite3.Connection, project: str) -> None:
    """Drop the project's graph (before a fresh bootstrap)."""
    conn.execute("DELETE FROM coaccess_files WHERE project = ?", (project,))
    conn.execute("DELETE FROM coaccess_edges WHERE project = ?", (project,))
