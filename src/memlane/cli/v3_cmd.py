"""V3 memory fields on the command line (docs/v3.md).

* :func:`v3_options` adds the V3 options to ``memlane remember`` (``--scope``, ``--source``,
  ``--file``, ``--module``, ``--work-unit``, ``--commit``, ``--citation``, ``--needs-review``,
  ``--fields``) and the V3 conditions to ``memlane recall`` (``--scope``, ``--source``, ``--file``,
  ``--module``, ``--work-unit``, ``--needs-review/--reviewed``).
* ``memlane memories list|stats|verify|relate|relations|prune|prune-low|archive|keep|pin``: the
  ``/api/v3`` routes.
* ``memlane coaccess bootstrap|predict|stats``: the co-access graph (``/api/v3/coaccess``).

Light: only typer, rich and the HTTP client are imported (no numpy, no database).
"""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from memlane.cli.client import client_for
from memlane.errors import MemlaneError, ValidationError

memories_app = typer.Typer(
    help="V3 memories: list by scope, source, work unit, file; review; relations.",
    no_args_is_help=True,
    add_completion=False,
)
coaccess_app = typer.Typer(
    help="Co-access graph of a project's files: bootstrap from git log, predict.",
    no_args_is_help=True,
    add_completion=False,
)
_out = Console()
_err = Console(stderr=True, soft_wrap=True)
_URL = typer.Option(None, "--url", help="Daemon URL (default http://127.0.0.1:7437 or MEMLANE_PORT).")


def parse_work_unit(text: str) -> dict[str, Any]:
    """``METHODOLOGY:OUTER/INNER/...`` (``native:spec-12/subtask-3``) as a work_unit_ref object.

    Raises:
        ValidationError: no ``:`` or an empty part.
    """
    methodology, sep, path = text.partition(":")
    parts = [p for p in path.split("/") if p]
    if not sep or not methodology or not parts:
        raise ValidationError("--work-unit: expected METHODOLOGY:OUTER/INNER/..., e.g. native:spec-12/subtask-3")
    return {"methodology": methodology, "hierarchy": parts}


_REMEMBER: dict[str, tuple[Any, Any]] = {
    "scope": (str | None, typer.Option(None, "--scope", help="global | module | work_unit | session.")),
    "source": (str | None, typer.Option(None, "--source", help="agent_explicit (default), user_taught, ...")),
    "related_files": (list[str], typer.Option([], "--file", help="A related file (repeatable).")),
    "related_modules": (list[str], typer.Option([], "--module", help="A related module (repeatable).")),
    "work_unit": (
        str | None,
        typer.Option(None, "--work-unit", help="METHODOLOGY:OUTER/INNER, e.g. native:spec-12/t3."),
    ),
    "commit_sha": (str | None, typer.Option(None, "--commit", help="The git commit that produced it.")),
    "citation_text": (str | None, typer.Option(None, "--citation", help="Short citation form (<= 200 chars).")),
    "needs_review": (bool, typer.Option(False, "--needs-review", help="Put it in the review queue.")),
    "type_fields": (str | None, typer.Option(None, "--fields", help="The type's extended fields as JSON.")),
}
_RECALL: dict[str, tuple[Any, Any]] = {
    "scopes": (list[str], typer.Option([], "--scope", help="Only this scope (repeatable).")),
    "sources": (list[str], typer.Option([], "--source", help="Only this source (repeatable).")),
    "related_file": (str | None, typer.Option(None, "--file", help="Only memories about this file.")),
    "related_module": (str | None, typer.Option(None, "--module", help="Only memories about this module.")),
    "work_unit": (str | None, typer.Option(None, "--work-unit", help="Only this work unit (outermost id).")),
    "needs_review": (bool | None, typer.Option(None, "--needs-review/--reviewed", help="Only (not) in review.")),
}


def v3_options(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator for ``remember`` (``kind="remember"``) or ``recall``: the command's signature gains
    the V3 options, and their values reach the command as ``**v3`` keyword arguments."""
    spec = _REMEMBER if kind == "remember" else _RECALL

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)
        params = [p for p in sig.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        params += [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann)
            for name, (ann, opt) in spec.items()
        ]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            v3 = {k: kwargs.pop(k) for k in spec if k in kwargs}
            return fn(*args, **kwargs, **v3)

        wrapper.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        return wrapper

    return deco


def remember_fields(**v: Any) -> dict[str, Any]:
    """The remember body's V3 part from the CLI options (only those given).

    Raises:
        ValidationError: a bad ``--work-unit`` or ``--fields`` that is not a JSON object.
    """
    out: dict[str, Any] = {}
    for k in ("scope", "source", "commit_sha", "citation_text"):
        if v.get(k) is not None:
            out[k] = v[k]
    for k in ("related_files", "related_modules"):
        if v.get(k):
            out[k] = list(v[k])
    if v.get("needs_review"):
        out["needs_review"] = True
    if v.get("work_unit"):
        out["work_unit_ref"] = parse_work_unit(v["work_unit"])
    if v.get("type_fields"):
        try:
            fields = json.loads(v["type_fields"])
        except json.JSONDecodeError as exc:
            raise ValidationError(f"--fields: not JSON ({exc.msg})") from None
        if not isinstance(fields, dict):
            raise ValidationError("--fields: expected a JSON object")
        out["type_fields"] = fields
    return out


def recall_where(**v: Any) -> dict[str, Any]:
    """The V3 recall conditions from the CLI options (empty: plain recall)."""
    out = {k: list(v[k]) for k in ("scopes", "sources") if v.get(k)}
    out.update(
        {k: v[k] for k in ("related_file", "related_module", "work_unit", "needs_review") if v.get(k) is not None}
    )
    return out


def _call(url: str | None, method: str, path: str, **kw: Any) -> Any:
    try:
        return client_for(url).request(method, path, **kw)
    except MemlaneError as exc:
        _err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None


def _table(items: list[dict[str, Any]], title: str) -> Table:
    t = Table(title=title)
    for col in ("id", "type", "scope", "source", "review", "files", "content"):
        t.add_column(col, overflow="fold")
    for m in items:
        review = "verified" if m.get("user_verified") else ("needs review" if m.get("needs_review") else "")
        t.add_row(
            m["id"][:8],
            m["type"],
            m.get("scope", ""),
            m.get("source", ""),
            review,
            ", ".join(m.get("related_files") or [])[:80],
            m["content"][:200],
        )
    return t


@memories_app.command("list")
def list_cmd(
    scope: list[str] = typer.Option([], "--scope", help="Only this scope (repeatable)."),
    source: list[str] = typer.Option([], "--source", help="Only this source (repeatable)."),
    type_: list[str] = typer.Option([], "--type", help="Only this type (repeatable)."),
    project: str | None = typer.Option(None, help="Only this project."),
    file: str | None = typer.Option(None, "--file", help="Only memories about this file."),
    module: str | None = typer.Option(None, "--module", help="Only memories about this module."),
    work_unit: str | None = typer.Option(None, "--work-unit", help="Only this work unit (outermost id)."),
    commit: str | None = typer.Option(None, "--commit", help="Only memories of this commit."),
    needs_review: bool | None = typer.Option(None, "--needs-review/--reviewed", help="Review state."),
    limit: int = typer.Option(50, "--limit", "-k", help="Page size, 1..1000."),
    as_json: bool = typer.Option(False, "--json", help="Print the raw JSON answer."),
    url: str | None = _URL,
) -> None:
    """List memories by their V3 fields, newest first."""
    params: list[tuple[str, Any]] = [("limit", limit)]
    params += [("scope", s) for s in scope] + [("source", s) for s in source] + [("type", t) for t in type_]
    for k, val in (
        ("project", project),
        ("related_file", file),
        ("related_module", module),
        ("work_unit", work_unit),
        ("commit_sha", commit),
    ):
        if val is not None:
            params.append((k, val))
    if needs_review is not None:
        params.append(("needs_review", str(needs_review).lower()))
    r = _call(url, "GET", "/api/v3/memories", params=params)
    if as_json:
        _out.print_json(json.dumps(r))
        return
    _out.print(_table(r["items"], f"{len(r['items'])} of {r['total']} memories"))


@memories_app.command("stats")
def stats_cmd(project: str | None = typer.Option(None, help="Only this project."), url: str | None = _URL) -> None:
    """Live memories by scope, source and type; review, verified and stale counts."""
    _out.print_json(json.dumps(_call(url, "GET", "/api/v3/stats", params={"project": project} if project else None)))


@memories_app.command("verify")
def verify_cmd(
    memory_id: str = typer.Argument(..., help="The memory's id."),
    reject: bool = typer.Option(False, "--back-to-review", help="Send it back to review instead."),
    url: str | None = _URL,
) -> None:
    """Confirm a memory (user_verified; it leaves the review queue)."""
    m = _call(url, "POST", f"/api/v3/memories/{memory_id}/verify", json={"verified": not reject, "who": "cli"})
    _out.print(f"{m['id']} user_verified={m['user_verified']} needs_review={m['needs_review']}", highlight=False)


@memories_app.command("relate")
def relate_cmd(
    source_id: str = typer.Argument(...),
    relation: str = typer.Argument(..., help="validates | required_with | conflicts_with | supersedes | derived_from"),
    target_id: str = typer.Argument(...),
    weight: float = typer.Option(1.0, help="Edge weight."),
    url: str | None = _URL,
) -> None:
    """Relate two memories: SOURCE RELATION TARGET."""
    r = _call(
        url,
        "POST",
        "/api/v3/relations",
        json={"source_id": source_id, "target_id": target_id, "relation": relation, "weight": weight},
    )
    _out.print(f"relation {r['id']}: {source_id} {relation} {target_id}", highlight=False)


@memories_app.command("relations")
def relations_cmd(memory_id: str = typer.Argument(...), url: str | None = _URL) -> None:
    """The relations touching one memory."""
    r = _call(url, "GET", "/api/v3/relations", params={"memory_id": memory_id})
    for e in r["relations"]:
        _out.print(f"{e['source_id']} {e['relation']} {e['target_id']} (weight {e['weight']})", highlight=False)


@coaccess_app.command("bootstrap")
def coaccess_bootstrap(
    repo: Path = typer.Argument(Path("."), help="The project's git repository."),
    project: str = typer.Option("", help="Project name the graph is kept under."),
    rev: str = typer.Option("HEAD", help="Revision whose history is read."),
    max_commits: int | None = typer.Option(None, help="Only the newest N commits."),
    url: str | None = _URL,
) -> None:
    """(Re)build the project's co-access graph from `git log` (the daemon runs git)."""
    r = _call(
        url,
        "POST",
        "/api/v3/coaccess/bootstrap",
        json={"repo": str(repo.resolve()), "project": project, "rev": rev, "max_commits": max_commits},
    )
    _out.print(
        f"{r['commits']} commits -> {r['files']} files, {r['edges']} edges ({r['took_ms']:.0f} ms)", highlight=False
    )


@coaccess_app.command("predict")
def coaccess_predict(
    file: str = typer.Argument(..., help="A file path, relative to the repository root."),
    project: str = typer.Option("", help="Project name."),
    k: int = typer.Option(10, "-k", help="How many files, 1..100."),
    url: str | None = _URL,
) -> None:
    """The files most likely needed together with FILE."""
    r = _call(url, "GET", "/api/v3/coaccess/predict", params={"file": file, "project": project, "k": k})
    for p in r["predictions"]:
        _out.print(f"{p['score']:8.3f}  {p['raw_count']:4d}  {p['reason']:<9}  {p['file']}", highlight=False)


@coaccess_app.command("stats")
def coaccess_stats(project: str = typer.Option("", help="Project name."), url: str | None = _URL) -> None:
    """Files and edges in the project's co-access graph."""
    _out.print_json(json.dumps(_call(url, "GET", "/api/v3/coaccess/stats", params={"project": project})))


def _report(r: dict[str, Any], verb: str) -> None:
    what = "would be " if r.get("dry_run") else ""
    _out.print(
        f"{r.get(verb, 0)} {what}{verb}" + (f", {r['stale_marked']} {what}marked stale" if "stale_marked" in r else ""),
        highlight=False,
    )
    for rule, n in (r.get("by_rule") or {}).items():
        _out.print(f"  {rule}: {n}", highlight=False)


@memories_app.command("prune")
def prune_cmd(
    dry_run: bool = typer.Option(False, "--dry-run", help="Only report what the rules would do."),
    project: str | None = typer.Option(None, help="Only this project's memories."),
    root: Path | None = typer.Option(
        None, "--root", help="Project root for the file rules (default: the project's latest session's directory)."
    ),
    url: str | None = _URL,
) -> None:
    """Prune now: apply the lifecycle rules (docs/v3.md) once."""
    body: dict[str, Any] = {"dry_run": dry_run, "project": project}
    if root is not None:
        body["project_root"] = str(root.resolve())
    _report(_call(url, "POST", "/api/v3/lifecycle/run", json=body), "pruned")


@memories_app.command("prune-low")
def prune_low_cmd(
    threshold: float = typer.Option(0.2, help="Confidence below this, 0..1."),
    idle_days: float = typer.Option(30.0, help="Not accessed for this many days."),
    project: str | None = typer.Option(None, help="Only this project's memories."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only report."),
    url: str | None = _URL,
) -> None:
    """Prune low-confidence memories not accessed for a while (pinned and kept ones stay)."""
    _report(
        _call(
            url,
            "POST",
            "/api/v3/lifecycle/prune-low-confidence",
            json={"threshold": threshold, "idle_days": idle_days, "project": project, "dry_run": dry_run},
        ),
        "pruned",
    )


@memories_app.command("archive")
def archive_cmd(
    work_unit: str = typer.Argument(..., help="METHODOLOGY:WORK_UNIT of the merged work unit, e.g. native:spec-12."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only report."),
    url: str | None = _URL,
) -> None:
    """Archive the memories of a merged work unit."""
    try:
        ref = parse_work_unit(work_unit)
    except ValidationError as exc:
        _err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(1) from None
    _report(
        _call(
            url,
            "POST",
            "/api/v3/lifecycle/archive",
            json={"methodology": ref["methodology"], "work_unit": ref["hierarchy"][0], "dry_run": dry_run},
        ),
        "archived",
    )


@memories_app.command("keep")
def keep_cmd(memory_id: str = typer.Argument(...), url: str | None = _URL) -> None:
    """Keep a memory: user-verified, never pruned by a rule."""
    m = _call(url, "POST", f"/api/v3/memories/{memory_id}/keep")
    _out.print(f"{m['id']} kept (user_verified)", highlight=False)


@memories_app.command("pin")
def pin_cmd(
    memory_id: str = typer.Argument(...),
    off: bool = typer.Option(False, "--off", help="Unpin."),
    url: str | None = _URL,
) -> None:
    """Pin a memory (always a session-start candidate, never pruned), or unpin it with --off."""
    m = _call(url, "POST", f"/api/v3/memories/{memory_id}/pin", json={"pinned": not off})
    _out.print(f"{m['id']} pinned={m['pinned']}", highlight=False)
