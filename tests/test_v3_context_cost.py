"""Context cost per module (docs/v3.md "Context cost"; seed sections 4, 5 and 13): samples from the
hooks (hook input sizes, the transcript's usage at Stop), the context_cost memory, the rolling window."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from conftest import api_client
from memlane.connectors.transcript import last_context_tokens
from memlane.services.inputs import RememberInput
from memlane.v3.context_cost import CHARS_PER_TOKEN, MIN_SESSIONS, WINDOW_SESSIONS, modules_of, p90
from test_hookclient import clean_env, hook_cmd, run_hook

FIXTURES = Path(__file__).parent / "fixtures" / "claude_code_transcripts"


def session(store: Any, key: str, files: list[str], *, chars: int = 0, context: int | None = None) -> dict[str, Any]:
    """One observed session: a Read of each file (hook inputs of ``chars`` characters each), a Stop
    reporting ``context`` tokens when given, then its end."""
    obs = store.observer.observer
    for f in files:
        obs.record(key, "Read", {"file_path": f}, project="p", payload_chars=chars)
    if context is not None:
        obs.step_end(key, "stop", project="p", context_tokens=context)
    return store.observer.end(key, project="p", finalize=False)


def cost_memories(store: Any) -> list[Any]:
    rows = store.db.read(
        lambda c: [r[0] for r in c.execute("SELECT id FROM memories WHERE type = 'context_cost' AND is_deleted = 0")]
    )
    return [store.memories.get(i) for i in rows]


def test_the_latest_usage_of_a_real_transcript() -> None:
    """The excerpt's last assistant line with usage: 3 input + 4,147 cache creation + 72,896 cache
    read + 1 output tokens (tests/fixtures/claude_code_transcripts/README.md)."""
    text = (FIXTURES / "4d5611e5-excerpt.jsonl").read_text()
    assert last_context_tokens(text) == 3 + 4147 + 72896 + 1
    assert last_context_tokens('{"type": "user", "message": {"content": "hi"}}\n') is None
    odd = json.dumps({"type": "assistant", "message": {"usage": {"input_tokens": True, "output_tokens": "9"}}})
    assert last_context_tokens(odd + "\nnot json\n") is None


def test_three_sessions_make_a_context_cost_memory_and_a_fourth_updates_it(store) -> None:
    first = session(store, "c1", ["src/app.py", "src/util.py", "README.md"], context=1000)
    assert first["context_cost"] == {"tokens": 1000, "basis": "transcript", "modules": ["src", "."], "memories": []}
    session(store, "c2", ["src/app.py"], context=2000)
    third = session(store, "c3", ["src/app.py"], context=9000)["context_cost"]
    [made] = third["memories"]
    assert made["action"] == "created" and made["module"] == "src"
    assert (made["average_tokens_per_session"], made["p90_tokens_per_session"], made["sample_count"]) == (4000, 9000, 3)
    [m] = cost_memories(store)
    assert (m.type, m.scope, m.source, m.needs_review, m.project) == (
        "context_cost",
        "module",
        "observer_inferred",
        True,
        "p",
    )
    assert m.type_fields == {
        "module": "src",
        "average_tokens_per_session": 4000,
        "p90_tokens_per_session": 9000,
        "sample_count": 3,
    }
    assert m.related_modules == ("src",) and "in src of p uses about 4,000 context tokens" in m.content
    # the root module has one sample: no memory for it yet
    fourth = session(store, "c4", ["src/app.py"], chars=999)["context_cost"]  # no Stop: hook input sizes
    assert (fourth["tokens"], fourth["basis"]) == (round(999 / CHARS_PER_TOKEN), "tool_io")
    [again] = cost_memories(store)
    assert again.id == m.id and again.type_fields["sample_count"] == 4
    assert again.type_fields["average_tokens_per_session"] == round((1000 + 2000 + 9000 + 250) / 4)


def test_a_session_without_a_token_measure_or_a_file_records_nothing(store) -> None:
    assert session(store, "n1", ["src/app.py"])["context_cost"]["tokens"] is None
    store.observer.observer.record("n2", "Bash", {"command": "ls"}, project="p", payload_chars=400)
    out = store.observer.end("n2", project="p", finalize=False)["context_cost"]
    assert (out["tokens"], out["modules"], out["memories"]) == (100, [], [])
    assert store.db.read(lambda c: c.execute("SELECT count(*) FROM context_cost_samples").fetchone()[0]) == 0


def test_the_rolling_window_keeps_the_last_30_sessions_per_module(store) -> None:
    for i in range(WINDOW_SESSIONS + 2):
        session(store, f"w{i:02d}", ["lib/a.py"], context=100 * (i + 1))
    [m] = cost_memories(store)
    window = [100 * (i + 1) for i in range(2, WINDOW_SESSIONS + 2)]  # the newest 30
    assert m.type_fields["sample_count"] == WINDOW_SESSIONS
    assert m.type_fields["average_tokens_per_session"] == round(sum(window) / len(window))
    api = api_client(store)
    plan = api.post("/api/v3/lifecycle/run", json={"dry_run": True}).json()
    assert plan["samples_trimmed"] == 2
    assert api.post("/api/v3/lifecycle/run", json={}).json()["samples_trimmed"] == 2
    left = store.db.read(
        lambda c: [r[0] for r in c.execute("SELECT session_key FROM context_cost_samples ORDER BY session_key")]
    )
    assert left == [f"w{i:02d}" for i in range(2, WINDOW_SESSIONS + 2)]
    assert api.post("/api/v3/lifecycle/run", json={}).json()["samples_trimmed"] == 0


def test_percentile_and_modules() -> None:
    assert p90([5]) == 5 and p90([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]) == 9 and p90([3, 1, 2]) == 3
    assert modules_of(["a.py", "src/x.py", "src/y.py", "/etc/passwd", "../up.py", "docs/a.md"]) == [".", "src", "docs"]
    assert MIN_SESSIONS == 3


def test_the_hooks_report_sizes_and_the_transcripts_usage(tmp_path: Path, start_daemon) -> None:
    """Through the installed command: post-tool-use sends the hook input's size, stop the usage of
    the transcript's latest assistant message (a real transcript under ~/.claude/projects)."""
    repo = tmp_path / "work" / "proj"
    (repo / ".git").mkdir(parents=True)
    user = tmp_path / "user"
    transcript = user / ".claude" / "projects" / "-work-proj" / "cc-1.jsonl"
    transcript.parent.mkdir(parents=True)
    shutil.copy(FIXTURES / "4d5611e5-excerpt.jsonl", transcript)
    home = tmp_path / "home"
    d = start_daemon(home, provider="none")
    env = clean_env(home, HOME=str(user))
    base = {"session_id": "cc-1", "transcript_path": str(transcript), "cwd": str(repo)}
    read = json.dumps(
        {
            **base,
            "hook_event_name": "PostToolUse",
            "tool_name": "Read",
            "tool_use_id": "t1",
            "tool_input": {"file_path": str(repo / "src" / "app.py")},
            "tool_response": {"type": "text", "file": {"content": "x" * 5000}},
        }
    )
    for name, text in (("post-tool-use", read), ("stop", json.dumps({**base, "hook_event_name": "Stop"}))):
        r = run_hook(hook_cmd(), name, text, env)
        assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    # a second session without a Stop: its cost is its hook inputs' size
    other = read.replace('"cc-1"', '"cc-2"')
    r = run_hook(hook_cmd(), "post-tool-use", other, env)
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b"")
    with d.client() as c:
        ends = [
            c.post("/api/v3/observer/session-end", json={"session_id": s, "finalize": False}).json()["context_cost"]
            for s in ("cc-1", "cc-2")
        ]
    assert [(e["tokens"], e["basis"], e["modules"]) for e in ends] == [
        (77047, "transcript", ["src"]),
        (round(len(other) / CHARS_PER_TOKEN), "tool_io", ["src"]),
    ]


def test_a_memory_that_cannot_be_written_never_stops_the_session_end(store) -> None:
    """The context cost's memory text already stored as another live memory's: the update is a
    conflict (memories are unique by content); it is reported, the samples and the promotion go on."""
    for key, ctx in (("e1", 1000), ("e2", 2000), ("e3", 3000)):
        session(store, key, ["lib/a.py"], context=ctx)
    [m] = cost_memories(store)
    taken = "A session working in lib of p uses about 2,500 context tokens (90th percentile 4,000, last 4 sessions): plan the work to fit."
    store.memories.remember(RememberInput(content=taken, project="p"))
    store.observer.observer.record("e4", "Read", {"file_path": "lib/a.py"}, project="p")
    store.observer.observer.step_end("e4", "stop", project="p", context_tokens=4000)
    out = store.observer.end("e4", project="p")
    assert out["context_cost"]["errors"][0]["module"] == "lib" and out["context_cost"]["memories"] == []
    assert out["promotion"] is not None and out["promotion"]["outcome"] == "passed"
    assert store.memories.get(m.id).type_fields["sample_count"] == 3  # unchanged, retried next time
    assert store.db.read(lambda c: c.execute("SELECT count(*) FROM context_cost_samples").fetchone()[0]) == 4
