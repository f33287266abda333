"""SQL for the V3 memory fields (migration 0014): filtered listing and counts (storage layer: SQL only)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

from memlane.storage.models import Memory


@dataclass(frozen=True, slots=True)
class V3Filter:
    """Which memories to keep; every given condition must hold (empty tuples and None: no condition).

    ``work_unit`` matches the outermost entry of ``work_unit_ref.hierarchy``; ``related_file`` /
    ``related_module`` match one entry of the list exactly. ``stale`` True keeps only memories marked
    stale, False only fresh ones.
    """

    project: str | None = None
    types: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    methodology: str | None = None
    work_unit: str | None = None
    related_file: str | None = None
    related_module: str | None = None
    needs_review: bool | None = None
    user_verified: bool | None = None
    commit_sha: str | None = None
    stale: bool | None = None
    include_deleted: bool = False
    include_superseded: bool = True

    def is_empty(self) -> bool:
        """True when no V3-specific condition is set (project/types/deleted aside)."""
        return not (
            self.scopes
            or self.sources
            or self.methodology
            or self.work_unit
            or self.related_file
            or self.related_module
            or self.needs_review is not None
            or self.user_verified is not None
            or self.commit_sha
            or self.stale is not None
        )


def _where(f: V3Filter) -> tuple[str, list[Any]]:
    where: list[str] = []
    args: list[Any] = []

    def one_of(col: str, values: tuple[str, ...]) -> None:
        if values:
            where.append(f"{col} IN ({','.join('?' * len(values))})")
            args.extend(values)

    if not f.include_deleted:
        where.append("is_deleted = 0")
    if not f.include_superseded:
        where.append("superseded_by IS NULL")
    if f.project is not None:
        where.append("project = ?")
        args.append(f.project)
    one_of("type", f.types)
    one_of("scope", f.scopes)
    one_of("source", f.sources)
    for col, value in (("methodology", f.methodology), ("commit_sha", f.commit_sha)):
        if value is not None:
            where.append(f"{col} = ?")
            args.append(value)
    if f.work_unit is not None:
        where.append("json_extract(work_unit_ref, '$.hierarchy[0]') = ?")
        args.append(f.work_unit)
    for col, value in (("related_files", f.related_file), ("related_modules", f.related_module)):
        if value is not None:
            where.append(f"EXISTS (SELECT 1 FROM json_each(memories.{col}) WHERE value = ?)")
            args.append(value)
    for col, flag in (("needs_review", f.needs_review), ("user_verified", f.user_verified)):
        if flag is not None:
            where.append(f"{col} = ?")
            args.append(int(flag))
    if f.stale is not None:
        where.append("stale_at IS NOT NULL" if f.stale else "stale_at IS NULL")
    return (" AND ".join(where) or "1=1"), args


def query(conn: sqlite3.Connection, f: V3Filter, *, limit: int, offset: int) -> tuple[list[Memory], int]:
    """One page of the memories matching ``f``, newest first, and the total that match."""
    clause, args = _where(f)
    total = conn.execute(f"SELECT count(*) FROM memories WHERE {clause}", args).fetchone()[0]
    rows = conn.execute(
        f"SELECT * FROM memories WHERE {clause} ORDER BY created_at DESC, seq DESC LIMIT ? OFFSET ?",
        (*args, limit, offset),
    ).fetchall()
    return [Memory.from_row(r) for r in rows], int(total)


def matching_ids(conn: sqlite3.Connection, f: V3Filter, ids: list[str]) -> set[str]:
    """Those of ``ids`` that match ``f``."""
    clause, args = _where(f)
    out: set[str] = set()
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        out.update(
            r[0] for r in conn.execute(f"SELECT id FROM memories WHERE id IN ({marks}) AND {clause}", (*chunk, *args))
        )
    return out


def counts(conn: sqlite3.Connection, project: str | None = None) -> dict[str, Any]:
    """Live memories by scope, by source and by type, and how many need review, are user-verified or stale."""
    cond, args = ("is_deleted = 0 AND project = ?", [project]) if project is not None else ("is_deleted = 0", [])

    def by(col: str) -> dict[str, int]:
        return {
            k: int(v)
            for k, v in conn.execute(
                f"SELECT {col}, count(*) FROM memories WHERE {cond} GROUP BY {col} ORDER BY 2 DESC", args
            )
        }

    row = conn.execute(
        f"SELECT count(*), sum(needs_review), sum(user_verified), sum(stale_at IS NOT NULL) FROM memories WHERE {cond}",
        args,
    ).fetchone()
    return {
        "live": int(row[0]),
        "needs_review": int(row[1] or 0),
        "user_verified": int(row[2] or 0),
        "stale": int(row[3] or 0),
        "by_scope": by("scope"),
        "by_source": by("source"),
        "by_type": by("type"),
    }
