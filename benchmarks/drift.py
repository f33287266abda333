"""``memlane bench drift``: drift detection and file staleness on real documentation edits
(issue 41; data: ``../shared/bench-data/drift/httpx``, its MANIFEST.md; docs/drift.md).

Protocol, per consecutive release pair (A, B):

* **Documents** are first A's pages, ingested through the document pipeline (chunked,
  embedded, stored) with the title ``docs/<page>``.
* **Memories** are the statements of A's pages (prose sentences of 40-400 characters, code
  blocks, tables, headings and front matter dropped, Markdown links reduced to their text),
  each written as ``<statement> (see [[docs/<page>]])`` at A's date: a wiki link to its page.
  Written through ``remember_many``, whose created listener queues the drift check that
  records each reference's baseline against A's page (the product's write path).
* **New version**: each A document is deleted and B's page at the same path is ingested with
  the same title, so the memory's link now resolves to B's page.
* **Ground truth**, mechanical: a statement *survived* when B's page holds a sentence whose
  normalised text (case-folded, whitespace collapsed, Markdown stripped) is equal or within a
  character-level similarity (``difflib`` ratio) of 0.9; otherwise it *drifted*.
* **Slot changes**: a memory whose reference's own sentence lost a number, version, date or
  identifier it held at the baseline, replaced by another (:meth:`Measure.slot_change`), is
  flagged at any threshold; precision/recall at a threshold count it as predicted.
* **Score**: the drift detector's score, the drop of the max cosine similarity between the
  memory's claim and the page (its chunk and sentence vectors) from the baseline taken against
  A's page to B's (:meth:`DriftService.measure`), and the rows :meth:`DriftService.check`
  writes at the threshold. A memory whose reference has no baseline is not scored (counted in
  ``unscored``).
* **File staleness**: pages of A deleted or renamed in ``changes_A_to_B.tsv``; a real git
  repository with A's pages committed then B's (``git mv`` is not used: git finds the renames
  from content), memories referencing every page of A as a project file; the staleness sweep
  (stat + git renames/deletions) is scored against the TSV.

Reported per pair: AUROC, precision and recall at the threshold, counts; the threshold is chosen
on one pair (``--tune-pair``) as the one with the best F1 among those with precision >= 0.8, and
the other pairs are held out.
"""

from __future__ import annotations

import difflib
import re
import shutil
import tempfile
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import numpy as np

PAIRS = (("0.13.0", "0.18.0"), ("0.18.0", "0.23.0"), ("0.23.0", "0.28.0"))
SURVIVE_RATIO = 0.9
MIN_CHARS, MAX_CHARS = 40, 400

_FENCE = re.compile(r"```.*?```", re.S)
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_HTML = re.compile(r"<[^>]+>")
_SENT = re.compile(r"(?<=[.!?])\s+(?=[A-Z`\"'(\[])")


def strip_markdown(text: str) -> str:
    """Prose of a Markdown page: code blocks, HTML tags and front matter dropped, links to their text."""
    text = _FENCE.sub("\n\n", text)
    text = _HTML.sub(" ", text)
    return _LINK.sub(r"\1", text)


def statements(markdown: str) -> list[str]:
    """The page's prose sentences of 40-400 characters, in order, deduplicated."""
    out: dict[str, None] = {}
    for block in re.split(r"\n\s*\n", strip_markdown(markdown)):
        lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
        if not lines or all(ln.startswith(("#", "|", "    ", ">>>", "$", "---", "===")) for ln in lines):
            continue
        lines = [ln for ln in lines if not ln.startswith(("#", "|"))]
        para = " ".join(re.sub(r"^([*+-]|\d+\.)\s+", "", ln) for ln in lines)
        for s in _SENT.split(para):
            s = s.strip()
            if MIN_CHARS <= len(s) <= MAX_CHARS and len(s.split()) >= 6 and not s.startswith((">>>", "$")):
                out.setdefault(s, None)
    return list(out)


def normalise(s: str) -> str:
    """Case-folded, Markdown emphasis and code marks dropped, whitespace collapsed."""
    return " ".join(re.sub(r"[`*_]", "", s).lower().split())


def survived(statement: str, page_b: list[str]) -> bool:
    """Whether B's page (its sentences) still holds the statement (equal or ratio >= 0.9)."""
    want = normalise(statement)
    norm = [normalise(x) for x in page_b]
    if want in norm:
        return True
    sm = difflib.SequenceMatcher(autojunk=False)
    sm.set_seq2(want)
    for x in norm:
        sm.set_seq1(x)
        if sm.real_quick_ratio() >= SURVIVE_RATIO and sm.quick_ratio() >= SURVIVE_RATIO and sm.ratio() >= SURVIVE_RATIO:
            return True
    return False


def auroc(scores: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve (Mann-Whitney U with average ranks for ties); nan with one class."""
    pos, neg = labels.sum(), (~labels).sum()
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    s = scores[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[labels].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def precision_recall(pred: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(precision, recall) of boolean predictions; precision 1.0 when nothing is predicted."""
    tp = int((pred & labels).sum())
    p = tp / int(pred.sum()) if pred.sum() else 1.0
    r = tp / int(labels.sum()) if labels.sum() else 1.0
    return p, r


def pages(root: Path, release: str) -> dict[str, str]:
    """``docs/<page>`` (no ``.md``) -> Markdown text of one release."""
    base = root / release
    return {
        str(p.relative_to(base).with_suffix("")): p.read_text(encoding="utf-8")
        for p in sorted((base / "docs").rglob("*.md"))
    }


def changes(root: Path, a: str, b: str) -> list[tuple[str, ...]]:
    """Rows of ``changes_A_to_B.tsv``: (status, path[, new path])."""
    text = (root / f"changes_{a}_to_{b}.tsv").read_text(encoding="utf-8")
    return [tuple(line.split("\t")) for line in text.splitlines() if line.strip()]


def release_date(root: Path, release: str) -> str:
    """The release's commit date as an ISO timestamp (UTC)."""
    from datetime import datetime

    parts = (root / release / "COMMIT.txt").read_text().split()
    dt = datetime.fromisoformat(f"{parts[1]}T{parts[2]}{parts[3][:3]}:{parts[3][3:]}")
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def run_pair(
    root: Path,
    a: str,
    b: str,
    *,
    embedder: Any,
    threshold: float,
    chunk_size: int | None,
    progress: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """One (A, B) pair in a fresh store: the drift scores and labels, and the rows written at
    ``threshold``. Returns the counts, AUROC, precision/recall, and per scored memory its score,
    label and ``[page, statement]``."""
    from memlane.config import load_settings
    from memlane.container import open_container
    from memlane.services.inputs import RememberInput

    pa, pb = pages(root, a), pages(root, b)
    home = Path(tempfile.mkdtemp(prefix="memlane-drift-bench-"))
    overrides: dict[str, Any] = {"drift": {"threshold": threshold}}
    if chunk_size is not None:
        overrides["memory"] = {
            "pipeline_v2": {"documents": {"chunk_size": chunk_size, "chunk_overlap": min(200, chunk_size // 4)}}
        }
    c = open_container(load_settings(home=home, **overrides), embedder=embedder)
    w = c.workers.get("documents")
    try:
        common = [p for p in pa if p in pb and strip_markdown(pa[p]).strip() and strip_markdown(pb[p]).strip()]
        progress(f"{a}->{b}: ingesting {len(common)} pages of {a}")
        doc_a = {p: c.documents.create(content=strip_markdown(pa[p]), title=p).id for p in common}
        while w.run_once():
            pass
        items: list[tuple[str, str, bool]] = []
        for p in common:
            b_sents = statements(pb[p])
            for s in statements(pa[p]):
                items.append((p, s, not survived(s, b_sents)))
        progress(f"{a}->{b}: writing {len(items)} memories (baselines against {a})")
        res = c.memories.remember_many(
            [RememberInput(content=f"{s} (see [[{p}]])", created_at=release_date(root, a)) for p, s, _ in items]
        )
        c.drift.drain()  # the checks the writes queued have taken the baselines
        progress(f"{a}->{b}: replacing the pages by {b}'s")
        for p in common:
            c.documents.delete(doc_a[p])
        doc_of = {p: c.documents.create(content=strip_markdown(pb[p]), title=p).id for p in common}
        while w.run_once():
            pass
        ids = [r.id for r in res]
        seqs = c.db.read(
            lambda conn: dict(
                conn.execute(f"SELECT id, seq FROM memories WHERE id IN ({','.join('?' * len(ids))})", ids).fetchall()
            )
        )
        progress(f"{a}->{b}: checking")
        measured = c.drift.measure([(i, seqs[i], p, doc_of[p]) for i, (p, _, _) in zip(ids, items)])
        slot_sim = c.settings.drift.slot_similarity
        dist = [m.drop if m is not None and m.baseline is not None else None for m in measured]
        change = [m.slot_change(slot_sim) if m is not None else None for m in measured]
        rows = c.drift.check([(i, seqs[i]) for i in ids])
        flagged = {r.memory_id for r in rows if r.error_type == "memory_drift"}
        ok = [k for k, d in enumerate(dist) if d is not None]
        scores = np.array([dist[k] for k in ok], dtype=np.float64)
        labels = np.array([items[k][2] for k in ok], dtype=bool)
        pred = np.array([ids[k] in flagged for k in ok], dtype=bool)
        prec, r = precision_recall(pred, labels)
        return {
            "pair": f"{a}->{b}",
            "pages": len(doc_of),
            "memories": len(ok),
            "unscored": len(items) - len(ok),
            "drifted": int(labels.sum()),
            "survived": int((~labels).sum()),
            "auroc": auroc(scores, labels),
            "threshold": threshold,
            "precision": prec,
            "recall": r,
            "flagged": int(pred.sum()),
            "scores": scores.tolist(),
            "labels": labels.tolist(),
            "slot_changed": [change[k] is not None for k in ok],
            "slot_changes": [[items[k][1], ch[0], ch[1], items[k][2]] for k in ok if (ch := change[k]) is not None],
            "statements": [[items[k][0], items[k][1]] for k in ok],
        }
    finally:
        c.close()
        shutil.rmtree(home, ignore_errors=True)


def at_threshold(
    scores: list[float], labels: list[bool], t: float, also: list[bool] | None = None
) -> tuple[float, float]:
    """(precision, recall) of ``score > t`` (or ``also``: the slot changes, flagged at any threshold)."""
    pred = np.array(scores) > t
    if also is not None:
        pred |= np.array(also, dtype=bool)
    return precision_recall(pred, np.array(labels, dtype=bool))


def choose_threshold(
    scores: list[float], labels: list[bool], *, min_precision: float = 0.8, also: list[bool] | None = None
) -> float:
    """The threshold (a score value) with the best F1 among those with precision >= ``min_precision``
    (predictions: ``score > t`` or ``also``); the best-F1 one when none reaches it."""
    cands = sorted(set(np.round(scores, 4).tolist()))
    best, best_any = None, None
    for t in cands:
        p, r = at_threshold(scores, labels, t, also)
        f = 2 * p * r / (p + r) if p + r else 0.0
        if best_any is None or f > best_any[0]:
            best_any = (f, t)
        if p >= min_precision and (best is None or f > best[0]):
            best = (f, t)
    return float((best or best_any or (0.0, 0.62))[1])


def _git(root: Path, *args: str) -> None:
    import subprocess

    subprocess.run(
        ["git", "-C", str(root), "-c", "user.email=bench@memlane", "-c", "user.name=bench", *args],
        check=True,
        capture_output=True,
        text=True,
    )


def _write_pages(root: Path, release_dir: Path) -> list[str]:
    paths = []
    for p in sorted((release_dir / "docs").rglob("*.md")):
        rel = p.relative_to(release_dir)
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(p.read_bytes())
        paths.append(str(rel))
    return paths


def run_staleness(root: Path, a: str, b: str) -> dict[str, Any]:
    """The file-staleness layer on one pair: a real git repository with A's pages committed, then
    B's (pages removed and added as files, git finds renames by content); one memory referencing
    each page of A; the sweep's renames and stale marks scored against ``changes_A_to_B.tsv``
    (the pages it lists as ``D`` and ``R``)."""
    from memlane.config import load_settings
    from memlane.container import open_container
    from memlane.services.inputs import RememberInput

    home = Path(tempfile.mkdtemp(prefix="memlane-stale-bench-"))
    repo = home / "repo"
    repo.mkdir()
    c = None
    try:
        a_pages = _write_pages(repo, root / a)
        _git(repo, "init", "-q")
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", a)
        c = open_container(load_settings(home=home / "home", embedding={"provider": "none"}))
        ids = {}
        for p in a_pages:
            ids[c.memories.remember(RememberInput(content=f"The page {p} documents this.", project=str(repo))).id] = p
        for p in a_pages:
            (repo / p).unlink()
        _write_pages(repo, root / b)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", b)
        out = c.drift.sweep(str(repo))
        truth_del, truth_ren = set(), {}
        for row in changes(root, a, b):
            if row[1] in a_pages:
                if row[0].startswith("D"):
                    truth_del.add(row[1])
                elif row[0].startswith("R"):
                    truth_ren[row[1]] = row[2]
        pred_del = {ids[m] for m, _, _ in out["stale_files"]}
        pred_ren = {ids[m]: new for m, _, new in out["renames"]}
        tp_del = len(pred_del & truth_del)
        tp_ren = sum(1 for k, v in pred_ren.items() if truth_ren.get(k) == v)
        pr = lambda tp, pred, truth: (tp / pred if pred else 1.0, tp / truth if truth else 1.0)  # noqa: E731
        return {
            "pair": f"{a}->{b}",
            "pages": len(a_pages),
            "deleted": sorted(truth_del),
            "renamed": truth_ren,
            "pred_deleted": sorted(pred_del),
            "pred_renamed": pred_ren,
            "deleted_pr": pr(tp_del, len(pred_del), len(truth_del)),
            "renamed_pr": pr(tp_ren, len(pred_ren), len(truth_ren)),
        }
    finally:
        if c is not None:
            c.close()
        shutil.rmtree(home, ignore_errors=True)


def run_drift_bench(
    root: Path,
    *,
    embedder: Any,
    threshold: float,
    tune_pair: int = 0,
    chunk_size: int | None = None,
    progress: Callable[[str], None] = lambda s: None,
) -> dict[str, Any]:
    """Every pair: drift (AUROC, precision/recall at ``threshold`` from the rows the detector
    wrote) and file staleness; plus the threshold chosen on ``PAIRS[tune_pair]`` and each pair's
    precision/recall at it (the other pairs held out)."""
    pairs = [
        run_pair(root, a, b, embedder=embedder, threshold=threshold, chunk_size=chunk_size, progress=progress)
        for a, b in PAIRS
    ]
    tp = pairs[tune_pair]
    tuned = choose_threshold(tp["scores"], tp["labels"], also=tp["slot_changed"])
    tuned_drop = choose_threshold(tp["scores"], tp["labels"])
    for i, r in enumerate(pairs):
        r["tuned_precision"], r["tuned_recall"] = at_threshold(r["scores"], r["labels"], tuned, r["slot_changed"])
        r["drop_only_precision"], r["drop_only_recall"] = at_threshold(r["scores"], r["labels"], tuned_drop)
        r["role"] = "tuning" if i == tune_pair else "held out"
    stale = [run_staleness(root, a, b) for a, b in PAIRS]
    return {
        "data": str(root),
        "threshold": threshold,
        "tuned_threshold": tuned,
        "drop_only_threshold": tuned_drop,
        "tune_pair": "->".join(PAIRS[tune_pair]),
        "chunk_size": chunk_size,
        "pairs": pairs,
        "staleness": stale,
    }
