"""Rendering of LoCoMo benchmark results (rich tables, JSON files).

Reference numbers come from ``/work/shared/bench-data/MANIFEST.md``. They are
turn-level LoCoMo "recall accuracy" averaged over all 1,986 questions; this
project's :func:`benchmarks.metrics.aggregate` averages over questions with
at least one resolvable evidence turn (1,982), so small differences are expected.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, is_dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

from rich.table import Table

from benchmarks.metrics import LEVELS, METRICS
from memlane.fsutil import atomic_write

__all__ = ["REFERENCE", "out_path", "reference_table", "render_ablation", "render_table", "write_json"]

#: Published turn-level retrieval reference points, in percent (MANIFEST.md).
REFERENCE: tuple[dict[str, Any], ...] = (
    {
        "name": "DRAGON (dense), dialog-turn database",
        "source": "LoCoMo paper, Table 3",
        "R@5": 56.7,
        "R@10": 66.2,
        "R@25": 76.7,
        "R@50": 82.7,
    },
    {
        "name": "BM25 (rank-bm25, lowercase alphanumeric tokens)",
        "source": "measured for this project",
        "R@5": 45.4,
        "R@10": 52.7,
        "R@25": 63.0,
        "R@50": 69.4,
    },
)
_REF_METRICS = ("R@5", "R@10", "R@25", "R@50")


def out_path(out: Path | None, name: str) -> Path:
    """The report path: ``out`` if given, else ``bench-results/{name}-{YYYYmmdd-HHMMSS}.json``
    (relative to the working directory, local time)."""
    if out is not None:
        return out
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("bench-results") / f"{name}-{stamp}.json"


def _fmt(value: float | None) -> str:
    """Percent value with 1 decimal; '-' for missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.1f}"


def _group_rows(table: Table, label: str, group: Mapping[str, Any], metrics: list[str]) -> None:
    for i, level in enumerate(LEVELS):
        n = f"{group['n']}" + (f" (+{group['excluded']} excl.)" if group.get("excluded") else "")
        table.add_row(
            label if i == 0 else "",
            n if i == 0 else "",
            level,
            *(_fmt(group[level].get(m)) for m in metrics),
            end_section=(i == len(LEVELS) - 1),
        )


def render_table(agg: Mapping[str, Any], reference: bool = True, title: str = "LoCoMo retrieval (percent)") -> Table:
    """Table of :func:`~benchmarks.metrics.aggregate` output.

    Rows: overall, then each category, each with a turn-level and a
    session-level line; columns: n (scored questions), level, then every
    metric as a percentage with 1 decimal. With ``reference=True`` the
    published turn-level R@k reference points (:data:`REFERENCE`) are appended
    as a final section for comparison (other cells '-').
    """
    metrics = list(agg.get("metrics") or METRICS)
    table = Table(title=title, title_justify="left")
    table.add_column("group")
    table.add_column("n", justify="right")
    table.add_column("level")
    for m in metrics:
        table.add_column(m, justify="right")
    _group_rows(table, "overall", agg["overall"], metrics)
    for cat, group in agg.get("by_category", {}).items():
        _group_rows(table, f"{cat} {group.get('name', '')}".strip(), group, metrics)
    if reference:
        for ref in REFERENCE:
            table.add_row(f"ref: {ref['name']}", "", "turn", *(_fmt(ref.get(m)) for m in metrics), style="dim")
    return table


def render_ablation(ablation: Mapping[str, Any], full: Mapping[str, Any]) -> Table:
    """Table of the feature-group ablation (``benchmarks.retrieval.ablation``): turn-level
    R@5, R@10 and NDCG@10 overall and R@5 per category with each group left out, under the
    full model's row (percent)."""
    cats = [str(c) for c in full.get("by_category", {})]
    table = Table(
        title="Learned ranker without each feature group (leave-one-conversation-out, turn level, percent)",
        title_justify="left",
    )
    for c in ("features", "R@5", "R@10", "NDCG@10", *(f"R@5 cat {c}" for c in cats)):
        table.add_column(c, justify="left" if c == "features" else "right")

    def row(label: str, overall: Mapping[str, Any], by_cat: Mapping[str, Any]) -> None:
        table.add_row(
            label,
            *(_fmt(overall.get(m)) for m in ("R@5", "R@10", "NDCG@10")),
            *(_fmt(by_cat.get(c, {}).get("R@5")) for c in cats),
        )

    row("all", full["overall"]["turn"], {str(k): v["turn"] for k, v in full.get("by_category", {}).items()})
    for group, res in ablation.items():
        row(f"without {group}", res["overall"], res["by_category"])
    return table


def reference_table() -> Table:
    """Small table of the published turn-level reference numbers (percent) with sources."""
    table = Table(title="Published LoCoMo turn-level recall (percent)", title_justify="left")
    table.add_column("retriever")
    for m in _REF_METRICS:
        table.add_column(m, justify="right")
    table.add_column("source")
    for ref in REFERENCE:
        table.add_row(ref["name"], *(_fmt(ref[m]) for m in _REF_METRICS), ref["source"])
    return table


def _default(obj: Any) -> Any:
    if is_dataclass(obj) and not isinstance(obj, type):
        return asdict(obj)
    if isinstance(obj, (datetime, date)):
        return obj.isoformat()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return obj.tolist()
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_json(path: str | Path, payload: Any) -> Path:
    """Write ``payload`` as indented UTF-8 JSON, atomically; parents are created.

    Floats are written unrounded; datetimes as ISO 8601, dataclasses as dicts,
    numpy values via ``tolist()``. Returns the path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(payload, indent=2, ensure_ascii=False, default=_default)
    atomic_write(path, (text + "\n").encode("utf-8"), mode=0o644, sync_dir=False)
    return path
