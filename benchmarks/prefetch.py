"""``memlane bench prefetch``: how well the co-access graph predicts the files changed together
(issue 42 item 4; protocol of ../shared/bench-data/cochange/MANIFEST.md).

Protocol: the graph is bootstrapped from the commits up to and including the release commit
("Version 0.23.0"), replayed into a real git repository by ``git fast-import`` and read back with
``git log`` (the same path as ``memlane coaccess bootstrap``); ``--no-git`` feeds the recorded
changes directly. Then, for each later commit that leaves two or more files in the tree, the first
of its files (git's order) is given and the rest are the targets. Scored at 5 and 10: recall (the
share of the targets in the top k, averaged over commits) and MRR (1 / rank of the first target in
the top 10, 0 if none). Two sets: every file, and ``.py`` files only (both the targets and the
predictions), the manifest's 98 commits.

Baselines, from the same pre-release commits: ``cochange-count`` ranks by how many commits changed
both files (paths as recorded, no rename following, ties by name); ``imports`` ranks the files
that import the given one or that it imports, in the 0.23.0 tree (both directions first, then by
name). ``--online`` also learns each scored commit after scoring it (graph and count baseline).
Per-commit time is the wall time of one ``CoAccessService.predict`` call (SQLite read included).
"""

from __future__ import annotations

import ast
import json
import statistics
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memlane.coaccess.gitlog import Change, Commit, read_history, replay_into_repo
from memlane.coaccess.graph import CoAccessService
from memlane.errors import ValidationError

RELEASE_SUBJECT = "Version 0.23.0"
KS = (5, 10)


def load_commits(path: Path) -> list[Commit]:
    """The manifest's ``httpx-commits.jsonl`` as :class:`Commit` records, oldest first."""
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        changes = tuple(
            Change(c["status"][0], c["paths"][-1], c["paths"][0] if len(c["paths"]) > 1 else None) for c in r["changes"]
        )
        out.append(Commit(r["commit"], r["date"], r.get("subject", ""), changes))
    return out


def split_at_release(commits: list[Commit], subject: str = RELEASE_SUBJECT) -> int:
    """Index just after the release commit (whose subject starts with ``subject``).

    Raises:
        ValidationError: no such commit.
    """
    for i, c in enumerate(commits):
        if c.subject.startswith(subject):
            return i + 1
    raise ValidationError(f"no commit with subject {subject!r}")


class CountBaseline:
    """Files co-changed most often with the given one (raw commit counts, recorded paths)."""

    def __init__(self) -> None:
        self.pairs: dict[str, Counter[str]] = defaultdict(Counter)

    def learn(self, c: Commit) -> None:
        files = c.files()
        for a in files:
            for b in files:
                if a != b:
                    self.pairs[a][b] += 1

    def predict(self, path: str, k: int, suffix: str) -> list[str]:
        ranked = sorted(((-n, f) for f, n in self.pairs.get(path, {}).items() if f.endswith(suffix)))
        return [f for _, f in ranked[:k]]


def _module_of(rel: str) -> str | None:
    if not rel.endswith(".py"):
        return None
    mod = rel[:-3].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


class ImportBaseline:
    """Files that import the given one or that it imports (Python ``import`` statements of a tree)."""

    def __init__(self, tree: Path) -> None:
        files = {p.relative_to(tree).as_posix(): p for p in tree.rglob("*.py")}
        by_module = {m: rel for rel in files if (m := _module_of(rel))}
        self.out: dict[str, set[str]] = defaultdict(set)
        self.inc: dict[str, set[str]] = defaultdict(set)
        for rel, p in files.items():
            try:
                node = ast.parse(p.read_text(errors="replace"))
            except SyntaxError:
                continue
            me = _module_of(rel) or ""
            pkg = me if rel.endswith("__init__.py") else me.rpartition(".")[0]
            for n in ast.walk(node):
                names: list[str] = []
                if isinstance(n, ast.Import):
                    names = [a.name for a in n.names]
                elif isinstance(n, ast.ImportFrom):
                    base = n.module or ""
                    if n.level:
                        parts = pkg.split(".") if pkg else []
                        parts = parts[: len(parts) - (n.level - 1)] if n.level > 1 else parts
                        base = ".".join([*parts, base] if base else parts)
                    names = [base] + [f"{base}.{a.name}" for a in n.names]
                for name in names:
                    target = by_module.get(name)
                    if target and target != rel:
                        self.out[rel].add(target)
                        self.inc[target].add(rel)

    def predict(self, path: str, k: int, suffix: str) -> list[str]:
        both = self.out.get(path, set()) & self.inc.get(path, set())
        either = (self.out.get(path, set()) | self.inc.get(path, set())) - both
        ranked = sorted(both) + sorted(either)
        return [f for f in ranked if f.endswith(suffix)][:k]


def score(predicted: list[str], targets: set[str]) -> dict[str, float]:
    """recall@5, recall@10 and MRR (over the top 10) of one prediction list."""
    out = {f"recall@{k}": len(targets & set(predicted[:k])) / len(targets) for k in KS}
    out["mrr"] = next((1.0 / (i + 1) for i, f in enumerate(predicted[:10]) if f in targets), 0.0)
    return out


def _cases(commits: list[Commit], suffix: str) -> list[tuple[Commit, str, set[str]]]:
    out = []
    for c in commits:
        files = [f for f in c.files() if f.endswith(suffix)]
        if len(files) >= 2:
            out.append((c, files[0], set(files[1:])))
    return out


def run(
    data_dir: Path, *, use_git: bool = True, online: bool = False, progress: Callable[[str], None] = lambda m: None
) -> dict[str, Any]:
    """The whole benchmark; returns the report (see the module docstring). Works in a temporary
    directory (database and git repository) that is removed at the end.

    Raises:
        ValidationError: the data directory lacks the manifest's files; git fails.
    """
    from memlane.config import load_settings
    from memlane.container import open_container

    jsonl = data_dir / "httpx-commits.jsonl"
    tree = data_dir / "httpx-0.23.0"
    if not jsonl.is_file() or not tree.is_dir():
        raise ValidationError(f"{data_dir}: expected httpx-commits.jsonl and httpx-0.23.0/ (MANIFEST.md)")
    commits = load_commits(jsonl)
    cut = split_at_release(commits)
    history, later = commits[:cut], commits[cut:]
    report: dict[str, Any] = {
        "data": str(data_dir),
        "history_commits": len(history),
        "later_commits": len(later),
        "online": online,
        "bootstrap": {},
        "sets": {},
    }
    imports = ImportBaseline(tree)
    with tempfile.TemporaryDirectory(prefix="memlane-prefetch-") as tmp:
        c = open_container(load_settings(home=Path(tmp) / "home", embedding={"provider": "none"}))
        try:
            svc = CoAccessService(c.db)
            t0 = time.perf_counter()
            if use_git:
                progress("replaying the history into a git repository (git fast-import)")
                replay_into_repo(history, Path(tmp) / "repo")
                progress("bootstrapping from git log")
                boot = svc.bootstrap_git(Path(tmp) / "repo")
                read_back = read_history(Path(tmp) / "repo")
                boot["differs_from_record"] = sum(1 for a, b in zip(history, read_back) if a.files() != b.files())
            else:
                svc.apply("", history, replace=True)
                boot = {"commits": len(history), **svc.stats("")}
            boot["source"] = "git log" if use_git else "recorded changes"
            boot["total_ms"] = round((time.perf_counter() - t0) * 1000, 1)
            report["bootstrap"] = boot
            for label, suffix in (("all files", ""), (".py files", ".py")):
                progress(f"scoring {label}")
                report["sets"][label] = _evaluate(svc, history, later, imports, suffix, online)
                if online:  # the next set starts from the pre-release graph again
                    svc.apply("", history, replace=True)
        finally:
            c.close()
    return report


def _evaluate(
    svc: CoAccessService, history: list[Commit], later: list[Commit], imports: ImportBaseline, suffix: str, online: bool
) -> dict[str, Any]:
    counts = CountBaseline()
    for c in history:
        counts.learn(c)
    sums: dict[str, Counter[str]] = defaultdict(Counter)
    times: list[float] = []
    reasons: Counter[str] = Counter()
    cases = _cases(later, suffix)
    case_by_sha = {c.sha: (q, t) for c, q, t in cases}
    for commit in later:
        case = case_by_sha.get(commit.sha)
        if case is not None:
            q, targets = case
            t0 = time.perf_counter()
            preds = svc.predict(q, k=10, suffix=suffix)
            times.append((time.perf_counter() - t0) * 1000)
            reasons.update(p.reason for p in preds)
            for name, predicted in (
                ("graph", [p.file for p in preds]),
                ("cochange-count", counts.predict(q, 10, suffix)),
                ("imports", imports.predict(q, 10, suffix)),
            ):
                sums[name].update(score(predicted, targets))
        if online:
            svc.apply("", [commit])
            counts.learn(commit)
    n = len(cases)
    methods = {name: {m: round(v / n, 4) for m, v in s.items()} for name, s in sums.items()}
    qs = statistics.quantiles(times, n=20) if len(times) >= 2 else times * 19
    return {
        "commits": n,
        "methods": methods,
        "prediction_reasons": dict(reasons),
        "ms_per_commit": {
            "p50": round(statistics.median(times), 3),
            "p95": round(qs[18], 3),
            "max": round(max(times), 3),
            "mean": round(statistics.fmean(times), 3),
        },
    }
