"""Real Claude Code session transcripts (tests/fixtures/claude_code_transcripts/README.md) replayed
as the hook inputs Claude Code sends (memlane.connectors.claude_code_replay): the events
themselves, then through the installed hook command against a real daemon (the observer's
signals, its scratchpad in observer_events, what the session end promotes, with and without the
loopback LLM), then `memlane import --format claude-code`.

The expected values come from reading the transcripts (the README lists each session's calls),
not from running the code: e.g. the excerpt reads assets/js/app.js four times (Read at steps 3,
4, 5 and 7) before its first edit of it, edits it twice in a row (steps 8, 9), and two of its Bash
calls fail (a `git add` of an ignored path, a commit stopped by the pre-commit check).
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from benchmarks.scripted_llm import ScriptedLlmServer
from memlane.cli.main import app
from memlane.connectors.claude_code_replay import ReplayStats, TranscriptError, replay
from memlane.connectors.events import from_claude_code
from memlane.storage import observer as obs_sql
from memlane.storage import sessions as sess_sql
from test_hookclient import clean_env, hook_cmd, run_hook

FIX = Path(__file__).parent / "fixtures" / "claude_code_transcripts"
EXCERPT = FIX / "4d5611e5-excerpt.jsonl"
HEAVY = FIX / "tool_heavy.jsonl"
SHORT = FIX / "short.jsonl"
SIBLING = FIX / "8463c716-excerpt.jsonl"
SUBAGENT = FIX / "491e126e-excerpt.jsonl"
ALL = (SHORT, HEAVY, EXCERPT, SIBLING, SUBAGENT)
EXCERPT_SID = "4d5611e5-241a-462a-8d15-5122611a9569"
HEAVY_SID = "d6e0bada-1959-4eec-a9d2-0bfade768d8f"
SHORT_SID = "55604662-cf2a-4331-851a-ec234028f8ca"
SUBAGENT_SID = "491e126e-1e71-469c-ade2-fcc8af567c74"
DOV = "/home/USER/projects/spotter-worktrees/spotter-dov"
SPOTTER = "/home/marco/projects/spotter"
APP_JS = "assets/js/app.js"
CSS = "priv/static/assets/spotter.css"

runner = CliRunner()


def events(path: Path, stats: ReplayStats | None = None) -> list[tuple[str, dict[str, Any]]]:
    return [(e.event, e.payload) for e in replay(path, stats=stats)]


def tool_calls(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    return [(ev, p["tool_name"], p["tool_input"]) for ev, p in events(path) if ev.startswith("post-tool-use")]


def usage_at(path: Path, line: int | None = None) -> int:
    """The context size the transcript reports at ``line`` (default: its last assistant line):
    that line's message.usage input + cache-creation + cache-read + output tokens."""
    entries = [json.loads(x) for x in path.read_text().splitlines()]
    no = line or max(i for i, o in enumerate(entries, 1) if o["type"] == "assistant")
    u = entries[no - 1]["message"]["usage"]
    return u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"] + u["output_tokens"]


# -- the replay: what Claude Code's hooks would have received ------------------------------------------------------
def test_calls_the_user_rejected_fire_no_post_hook() -> None:
    """short.jsonl: one prompt, a Bash and a Glob call the user rejected at the permission prompt
    (PreToolUse runs before that prompt; the tools never ran), the user's interruption (no Stop),
    then a /model slash command (local: no prompt hook)."""
    stats = ReplayStats()
    evs = events(SHORT, stats)
    assert [e for e, _ in evs] == ["session-start", "user-prompt-submit", "pre-tool-use", "pre-tool-use", "session-end"]
    assert [p["tool_name"] for e, p in evs if e == "pre-tool-use"] == ["Bash", "Glob"]
    assert evs[1][1]["prompt"] == "mix phx.server doesnt seem to start"
    assert {p["session_id"] for _, p in evs} == {SHORT_SID}
    assert {p["cwd"] for _, p in evs} == {SPOTTER}
    assert (stats.rejected, stats.tool_calls, stats.failed_calls, stats.unanswered, stats.stops) == (2, 0, 0, 0, 0)
    assert evs[0][1] == {
        "session_id": SHORT_SID,
        "transcript_path": str(SHORT.resolve()),
        "cwd": SPOTTER,
        "hook_event_name": "SessionStart",
        "permission_mode": "bypassPermissions",
        "source": "startup",
    }
    assert evs[-1][1]["reason"] == "other"


def test_tool_calls_come_in_the_order_their_answers_arrived() -> None:
    """tool_heavy.jsonl: two prompts (the /mcp command between them is local), six calls; the Glob
    and the WebSearch were issued together and the Glob answered first. The user interrupted both
    turns: no Stop."""
    evs = events(HEAVY)
    assert "stop" not in [e for e, _ in evs]
    names = [(e, p.get("tool_name")) for e, p in evs if e.endswith("tool-use")]
    assert names[:4] == [
        ("pre-tool-use", "Bash"),
        ("post-tool-use", "Bash"),
        ("pre-tool-use", "Bash"),
        ("post-tool-use", "Bash"),
    ]
    prompts = [p["prompt"] for e, p in evs if e == "user-prompt-submit"]
    assert prompts[0] == "start phoenix in background"
    assert prompts[1].startswith("scrolling back in xterm.js still does not work")
    assert len(prompts) == 2
    calls = tool_calls(HEAVY)
    assert [name for _, name, _ in calls] == ["Bash", "Bash", "Glob", "WebSearch", "Read", "WebFetch"]
    assert all(ev == "post-tool-use" for ev, _, _ in calls)
    read = next(p for e, p in evs if e == "post-tool-use" and p["tool_name"] == "Read")
    assert read["tool_input"] == {"file_path": f"{SPOTTER}/{APP_JS}"}
    # tool_response is Claude Code's structured answer (the line's toolUseResult)
    assert read["tool_response"]["type"] == "text"
    assert read["tool_response"]["file"]["filePath"] == f"{SPOTTER}/{APP_JS}"
    assert read["tool_use_id"] == "toolu_01VpPeBD2ziigLLpybShAGoU"
    bash = next(p for e, p in evs if e == "post-tool-use")
    assert bash["tool_response"]["backgroundTaskId"] == "bae407b"


def test_failed_calls_become_post_tool_use_failure_and_usage_is_summed() -> None:
    """The excerpt: 27 answered calls, two of them failed; the last call was cut off with the excerpt."""
    stats = ReplayStats()
    calls = tool_calls(EXCERPT)
    evs = events(EXCERPT, stats)
    assert len(calls) == 27 and (stats.tool_calls, stats.failed_calls, stats.unanswered) == (25, 2, 1)
    failed = [(i, p) for i, (e, p) in enumerate(e for e in evs if e[0].startswith("post")) if "error" in p]
    assert [i + 1 for i, _ in failed] == [20, 26]
    assert failed[0][1]["error"].startswith("Exit code 1\nThe following paths are ignored by one of your .gitignore")
    assert failed[1][1]["error"].startswith("Pre-commit validation failed:")
    assert failed[0][1]["hook_event_name"] == "PostToolUseFailure" and failed[0][1]["is_interrupt"] is False
    assert "tool_response" not in failed[0][1]
    assert [e for e, _ in evs][:3] == ["session-start", "user-prompt-submit", "user-prompt-submit"]
    assert evs[1][1]["prompt"].startswith("Work on bead spotter-dov.") and evs[2][1]["prompt"] == "continue"
    # the excerpt is cut inside the "continue" turn: it ends there, so its Stop comes before the end
    assert [e for e, _ in evs][-2:] == ["stop", "session-end"] and stats.stops == 1
    # 26 assistant messages carry usage (README); the session read most of its context from the cache
    assert stats.usage["messages"] == 26
    assert stats.usage["cache_read_input_tokens"] > 100 * stats.usage["input_tokens"]


def test_every_payload_reads_like_a_live_hook_input() -> None:
    """Each replayed payload goes through the live hooks' mapping without an error, keeping the
    tool's name and input; a failure becomes the observer's failed-call shape."""
    for path in ALL:
        for ev, p in events(path):
            hook = from_claude_code(ev, p)
            assert hook.session_key == p["session_id"] and hook.cwd == p["cwd"]
            if ev.endswith("tool-use") or ev == "post-tool-use-failure":
                assert (hook.tool_name, hook.tool_input) == (p["tool_name"], p["tool_input"])
            if ev == "post-tool-use-failure":
                assert hook.tool_response == {"is_error": True, "error": p["error"]}


def test_replayed_payloads_have_the_shape_of_recorded_hook_inputs() -> None:
    """Checked against another real source: the PostToolUse inputs a logging hook recorded in a
    different session (tests/fixtures/claude_code_hooks, Claude Code of July 2025). For each tool
    both sources have (Read, Edit, Bash), the replayed payload has every top-level field the hook
    received and its tool_response (the transcript's toolUseResult) every key of the hook's; the
    newer Claude Code of the transcripts adds tool_use_id, permission_mode and Bash's
    noOutputExpected."""
    hooks = json.loads((FIX.parent / "claude_code_hooks" / "post_tool_use.json").read_text())
    recorded = {p["tool_name"]: p for p in hooks}
    replayed = {p["tool_name"]: p for path in (EXCERPT, HEAVY) for e, p in events(path) if e == "post-tool-use"}
    common = sorted(set(recorded) & set(replayed))
    assert common == ["Bash", "Edit", "Read"]
    for tool in common:
        rec, rep = recorded[tool], replayed[tool]
        assert set(rec) <= set(rep), (tool, set(rec) - set(rep))
        assert set(rec["tool_response"]) <= set(rep["tool_response"]), tool
    assert set(replayed["Read"]["tool_response"]["file"]) == set(recorded["Read"]["tool_response"]["file"])
    assert set(replayed["Bash"]["tool_response"]) - set(recorded["Bash"]["tool_response"]) == {"noOutputExpected"}


def recorded_hooks(path: Path) -> list[tuple[str, str | None, int]]:
    """The hook runs a transcript recorded (its users' own hooks' ``progress`` lines, one per hook
    command): ``(hookEvent, toolUseID or None, the line of the latest user/assistant line)``, one
    entry per event and call (several hook commands of one event count once)."""
    out: list[tuple[str, str | None, int]] = []
    last = 0
    for no, line in enumerate(path.read_text().splitlines(), 1):
        o = json.loads(line)
        d = o.get("data") or {}
        if o["type"] in ("user", "assistant"):
            last = no
        elif o["type"] == "progress" and d.get("type") == "hook_progress":
            tool = o.get("toolUseID") if d["hookEvent"] in ("PreToolUse", "PostToolUse", "PostToolUseFailure") else None
            key = (d["hookEvent"], tool, last)
            if key not in out:
                out.append(key)
    return out


def recorded_post_hooks(path: Path) -> dict[str, str]:
    """The post-tool hook recorded for each call, by tool_use_id."""
    return {t: e for e, t, _ in recorded_hooks(path) if t and e.startswith("PostToolUse")}


def test_replayed_events_are_the_hooks_claude_code_ran() -> None:
    """Ground truth in the transcripts themselves: their users' own hooks left a record of each
    run. Every call with a recorded post hook is replayed as that event, and every call with a
    recorded PreToolUse has a replayed PreToolUse; the one replayed failure without a record is
    step 26 of the excerpt, the commit the user's PreToolUse hook blocked (a transcript does not
    mark a block: docs/v3.md). Every recorded Stop is replayed at the same line, and no other Stop
    (but the one at the end of an excerpt cut inside a turn)."""
    checked = {"post": 0, "pre": 0, "stop": 0}
    for path in ALL:
        recorded = recorded_hooks(path)
        fired = recorded_post_hooks(path)
        evs = [(e, p, ev_line) for (e, p), ev_line in zip(events(path), (ev.line for ev in replay(path)))]
        calls = [p for e, p, _ in evs if e.startswith("post-tool-use")]
        for step, p in enumerate(calls, 1):
            if p["tool_use_id"] in fired:
                assert p["hook_event_name"] == fired[p["tool_use_id"]], (path.name, step)
                checked["post"] += 1
            elif path == EXCERPT:
                assert (step, p["hook_event_name"]) == (26, "PostToolUseFailure"), step
                assert p["error"].startswith("Pre-commit validation failed")
        pre_ids = {p["tool_use_id"] for e, p, _ in evs if e == "pre-tool-use"}
        for e, tool, _ in recorded:
            if e == "PreToolUse":
                assert tool in pre_ids, (path.name, tool)
                checked["pre"] += 1
        stops = [line for e, _, line in evs if e == "stop"]
        if path in (EXCERPT, SIBLING):  # cut inside a turn: the replay's last Stop is where the cut is
            stops = stops[:-1]
        assert [line for e, _, line in recorded if e == "Stop"] == stops, path.name
        checked["stop"] += sum(1 for e, _, _ in recorded if e == "Stop")
    # post: the excerpt 25 PostToolUse + 1 PostToolUseFailure, tool_heavy 2, the sibling 1; pre: the rejected
    # Bash of short, tool_heavy's 2 Bash, the sibling's first Bash, 491e126e's 4 Bash; stop: 491e126e's turn
    assert checked == {"post": 26 + 2 + 1, "pre": 1 + 2 + 1 + 4, "stop": 1}


def test_a_call_claude_code_refused_fires_no_hook() -> None:
    """8463c716-excerpt: two Bash calls issued together; the first runs (its PreToolUse hooks ran)
    and fails (exit code 2: PostToolUseFailure recorded), the second is cancelled before it starts
    ("<tool_use_error>Sibling tool call errored</tool_use_error>": no hook of any kind recorded)."""
    stats = ReplayStats()
    calls = [p for e, p in events(SIBLING, stats) if e.startswith("post-tool-use")]
    assert [(p["hook_event_name"], p["tool_name"]) for p in calls] == [("PostToolUseFailure", "Bash")]
    assert calls[0]["error"].startswith("Exit code 2\n")
    assert (stats.failed_calls, stats.refused, stats.tool_calls) == (1, 1, 0)
    assert recorded_post_hooks(SIBLING) == {calls[0]["tool_use_id"]: "PostToolUseFailure"}


def test_bad_lines_are_reported_with_their_numbers(tmp_path: Path) -> None:
    lines = HEAVY.read_bytes().splitlines(keepends=True)
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(b"".join(lines[:5]) + b'{"type": "user", "mess\n' + b"[1, 2]\n" + b"".join(lines[5:]))
    stats = ReplayStats()
    evs = events(broken, stats)
    assert stats.bad == [
        (6, "not JSON: Unterminated string starting at (column 18)"),
        (7, "expected a JSON object, got list"),
    ]
    assert stats.bad_lines == 2
    assert [p["tool_name"] for e, p in evs if e == "post-tool-use"] == [n for _, n, _ in tool_calls(HEAVY)]
    with pytest.raises(TranscriptError) as info:
        list(replay(broken, strict=True))
    assert info.value.line == 6


# -- through the installed hook command and a real daemon ---------------------------------------------------------
def replay_through_hooks(path: Path, user_home: Path, env: dict[str, str]) -> None:
    """Each event of ``path`` through the installed hook command, as Claude Code would run it: the
    transcript file (under the user's ~/.claude/projects, where the hook may read it) holds the
    lines written so far when each hook fires."""
    src = path.read_bytes().splitlines(keepends=True)
    live = user_home / ".claude" / "projects" / "-replay" / f"{path.stem}.jsonl"
    live.parent.mkdir(parents=True, exist_ok=True)
    live.write_bytes(b"")
    for ev in replay(path):
        live.write_bytes(b"".join(src[: ev.line]))
        payload = {**ev.payload, "transcript_path": str(live)}
        r = run_hook(hook_cmd(), ev.event, json.dumps(payload), env)
        assert (r.returncode, r.stderr) == (0, b""), (ev.event, ev.line, r)


def hook_env(tmp_path: Path, home: Path) -> tuple[Path, dict[str, str]]:
    user_home = tmp_path / "user"
    return user_home, clean_env(home, HOME=str(user_home))


def read_store(home: Path, fn: Any) -> Any:
    """``fn(conn)`` on a read-only connection to the daemon's store (its queries are storage's)."""
    conn = sqlite3.connect(f"file:{home / 'memories.db'}?mode=ro", uri=True)
    try:
        return fn(conn)
    finally:
        conn.close()


def observed_events(home: Path, session_id: str) -> list[obs_sql.Event]:
    """The session's rows in the observer's scratchpad (observer_events)."""
    return read_store(home, lambda c: obs_sql.events(c, session_id))


def promoted_memories(d: Any, expect: int) -> list[dict[str, Any]]:
    """The observer's memories once the session end (run after the hook's answer) stored ``expect``."""
    deadline = time.monotonic() + 60
    with d.client() as c:
        while True:
            mems = c.get("/api/v3/memories", params={"source": "observer_inferred"}).json()["items"]
            if len(mems) >= expect or time.monotonic() > deadline:
                return mems
            time.sleep(0.2)


#: The excerpt's file accesses, in order (README): the CSS edit, three Reads of app.js, a fourth
#: Read, two Edits of app.js. Its Greps are no file accesses: the one in app.js (step 2) names a
#: file that does not exist on this machine, the one under lib/ (step 6) and the one over the
#: whole worktree (step 22) are search scopes (docs/v3.md, "Which tool calls are file accesses").
EXCERPT_FILES = [CSS, APP_JS, APP_JS, APP_JS, APP_JS, APP_JS, APP_JS]


def test_the_excerpt_through_the_hooks(tmp_path: Path, start_daemon) -> None:
    """Signals, scratchpad and the session end's promotion (no LLM: template text)."""
    home = tmp_path / "home"
    d = start_daemon(home, provider="none")
    user_home, env = hook_env(tmp_path, home)
    replay_through_hooks(EXCERPT, user_home, env)

    # the scratchpad: one row per answered call, the failures with their text
    rows = observed_events(home, EXCERPT_SID)
    assert [r.step for r in rows] == list(range(1, 28))
    assert [r.tool_name for r in rows] == [n for _, n, _ in tool_calls(EXCERPT)]
    assert [r.step for r in rows if r.error_hash] == [20, 26]
    assert [r.step for r in rows if r.is_edit] == [1, 8, 9]

    with d.client() as c:
        signals = c.get("/api/v3/observer/signals", params={"session_id": EXCERPT_SID}).json()["signals"]
    by: dict[str, list[dict[str, Any]]] = {}
    for s in signals:
        by.setdefault(s["type"], []).append(s)
    assert [s["file_path"] for s in by["file_access"]] == EXCERPT_FILES
    # the fourth Read of app.js (step 7) comes before any edit of it
    assert [(s["step"], s["file_path"], s["read_count"]) for s in by["time_anomaly"]] == [(7, APP_JS, 4)]
    # the second Edit of app.js right after the first, no other file edited between
    assert [
        (s["step"], s["edited_file_path"], s["re_edited_within_steps"], s["likely_cause"]) for s in by["backtrack"]
    ] == [(9, APP_JS, 1, "wrong_assumption")]
    assert [(s["step"], s["tool_name"], s["retry_count"]) for s in by["error_retry"]] == [
        (20, "Bash", 1),
        (26, "Bash", 1),
    ]
    assert by["error_retry"][1]["error_message"].startswith("Pre-commit validation failed:")
    # files within 3 steps of each other: the CSS (step 1) with app.js (steps 3, 4)
    pairs = [tuple(sorted((s["file_a"], s["file_b"]))) for s in by["co_access"]]
    assert pairs == [(APP_JS, CSS), (APP_JS, CSS)]
    # Bash runs from step 10 to 21 and 23 to 27: the triple recurs from step 13 on
    assert {tuple(s["tool_sequence"]) for s in by["sequence"]} == {("Bash", "Bash", "Bash")}
    assert [s["step"] for s in by["sequence"]] == [*range(13, 22), 25, 26, 27]

    # SessionEnd: the last call succeeded, so the session passed; of the candidates only the
    # four reads clear their frequency threshold (one session; a backtrack needs two)
    [mem] = promoted_memories(d, 1)
    assert (mem["type"], mem["related_files"], mem["needs_review"]) == ("module_insight", [APP_JS], True)
    assert mem["content"].startswith(f"{APP_JS} was read 4 times in one session")
    assert mem["project"] == DOV


def test_the_excerpt_promotion_with_the_loopback_llm(tmp_path: Path, start_daemon) -> None:
    """The same replay with an LLM: one synthesis call whose observation names app.js and its four
    reads; its answer is the stored memory."""
    synth: list[list[dict[str, Any]]] = []

    def script(prompt: str) -> str:
        if "<observations>" not in prompt:  # the session's continuity judge
            return "{}"
        block = json.loads(prompt.split("<observations>")[1].split("</observations>")[0])
        synth.append(block)
        return json.dumps(
            {"memories": [{"index": o["index"], "content": "Read app.js hooks once, whole."} for o in block]}
        )

    home = tmp_path / "home"
    with ScriptedLlmServer(script) as llm:
        env = {"MEMLANE_LLM__PROVIDER": "ollama", "MEMLANE_LLM__BASE_URL": llm.url, "MEMLANE_LLM__MODEL": "scripted"}
        d = start_daemon(home, provider="none", env=env)
        user_home, henv = hook_env(tmp_path, home)
        replay_through_hooks(EXCERPT, user_home, henv)
        [mem] = promoted_memories(d, 1)
    assert len(synth) == 1 and len(synth[0]) == 1
    assert APP_JS in json.dumps(synth[0][0]) and "4 times" in json.dumps(synth[0][0])
    assert (mem["type"], mem["content"], mem["related_files"]) == (
        "module_insight",
        "Read app.js hooks once, whole.",
        [APP_JS],
    )


def test_tool_heavy_and_short_through_the_hooks(tmp_path: Path, start_daemon) -> None:
    """tool_heavy: of six calls only the Read names a file (the Glob has a pattern, the web tools
    URLs); short: the rejected calls leave the scratchpad empty. Both sessions are stored as ended
    with their transcripts; neither promotes anything."""
    home = tmp_path / "home"
    d = start_daemon(home, provider="none")
    user_home, env = hook_env(tmp_path, home)
    for path in (HEAVY, SHORT, SUBAGENT):
        replay_through_hooks(path, user_home, env)
    assert [r.tool_name for r in observed_events(home, HEAVY_SID)] == [
        "Bash",
        "Bash",
        "Glob",
        "WebSearch",
        "Read",
        "WebFetch",
    ]
    assert observed_events(home, SHORT_SID) == []
    with d.client() as c:
        signals = c.get("/api/v3/observer/signals", params={"session_id": HEAVY_SID}).json()["signals"]
        assert [(s["type"], s.get("file_path")) for s in signals] == [("file_access", APP_JS)]
        for sid, prompt in (
            (HEAVY_SID, "start phoenix in background"),
            (SHORT_SID, "mix phx.server doesnt seem to start"),
        ):
            sess = c.get(f"/api/sessions/{sid}").json()["session"]
            assert sess["ended_at"] is not None, sess
            assert sess["project"] == SPOTTER
            # the session end sent the transcript as rendered by the hook (user and assistant text)
            stored = read_store(home, lambda conn, sid=sid: sess_sql.get_transcript(conn, sid))
            assert stored.startswith(f"user: {prompt}\nassistant: ")
        # 491e126e: the Task call (step 1) is a work step of its own; ExitPlanMode and the four Bash
        # calls (steps 2-6) end with the turn's Stop; the interrupted first turn left no boundary
        steps = c.get("/api/v3/observer/steps", params={"session_id": SUBAGENT_SID}).json()["steps"]
        # the Stop hook read the context size from the transcript as it was when the turn ended
        assert read_store(home, lambda conn: obs_sql.session_tokens(conn, SUBAGENT_SID))[0] == usage_at(SUBAGENT, 31)
        assert [(s["first_step"], s["last_step"], s["end"], s["failed"]) for s in steps] == [
            (1, 1, "task", False),
            (2, 6, "stop", False),
        ], steps
    assert promoted_memories(d, 0) == []


def flat(r: Any) -> str:
    """The command's output with the terminal's line wrapping undone."""
    return " ".join(r.output.split())


# -- memlane import --format claude-code ----------------------------------------------------------------------------
def test_import_replays_each_session_once(tmp_path: Path, start_daemon) -> None:
    """A project directory of transcripts: each session's calls reach the observer once; a second
    import skips them all; a bad line is reported with its file and number (exit 1)."""
    home = tmp_path / "home"
    d = start_daemon(home, provider="none")
    proj = tmp_path / "projects" / "-home-marco-projects-spotter"
    proj.mkdir(parents=True)
    for p in (EXCERPT, HEAVY, SHORT):
        (proj / p.name).write_bytes(p.read_bytes())
    url = ["--url", d.url]
    env = {"MEMLANE_HOME": str(home)}
    r = runner.invoke(app, ["import", str(proj), "--format", "claude-code", *url], env=env)
    assert r.exit_code == 0, r.output
    # signals: the excerpt 25, tool_heavy 1; steps: the Stop where the excerpt is cut (the other two were interrupted)
    assert "imported 3 sessions (33 tool calls, 2 failed, 26 observer signals, 1 work steps ended)" in flat(r), r.output
    assert len(observed_events(home, EXCERPT_SID)) == 27 and len(observed_events(home, HEAVY_SID)) == 6
    # the Stop where the excerpt is cut carries the context size of its last assistant line
    assert read_store(home, lambda conn: obs_sql.session_tokens(conn, EXCERPT_SID))[0] == usage_at(EXCERPT)
    [mem] = promoted_memories(d, 1)
    assert mem["related_files"] == [APP_JS]

    r = runner.invoke(app, ["import", str(proj), "--format", "claude-code", *url], env=env)
    assert r.exit_code == 0 and "imported 0 sessions" in flat(r) and "skipped 3 already known" in flat(r), r.output
    assert len(observed_events(home, EXCERPT_SID)) == 27

    broken = tmp_path / "broken" / "session.jsonl"
    broken.parent.mkdir()
    broken.write_bytes(b'{"not closed\n' + HEAVY.read_bytes().replace(HEAVY_SID.encode(), b"another-session"))
    r = runner.invoke(app, ["import", str(broken), "--format", "claude-code", *url], env=env)
    assert r.exit_code == 1 and "imported 1 sessions (6 tool calls" in flat(r), r.output
    assert f"{broken} line 1: not JSON" in flat(r).replace("\n", "")
    assert len(observed_events(home, "another-session")) == 6


def test_import_leaves_a_session_the_observer_is_still_seeing(tmp_path: Path, start_daemon) -> None:
    """Tool calls of the session already reached the observer (the hooks of a session still
    running) but no session end: the import leaves it alone, so no call counts twice."""
    home = tmp_path / "home"
    d = start_daemon(home, provider="none")
    _, payload = next((e, p) for e, p in events(HEAVY) if e == "post-tool-use" and p["tool_name"] == "Read")
    _, env = hook_env(tmp_path, home)
    r = run_hook(hook_cmd(), "post-tool-use", json.dumps(payload), env)
    assert (r.returncode, r.stderr) == (0, b"")
    r = runner.invoke(
        app, ["import", str(HEAVY), "--format", "claude-code", "--url", d.url], env={"MEMLANE_HOME": str(home)}
    )
    assert r.exit_code == 0 and "imported 0 sessions" in flat(r) and "still running" in flat(r), r.output
    assert [e.tool_name for e in observed_events(home, HEAVY_SID)] == ["Read"]


def test_import_refuses_what_does_not_fit(tmp_path: Path) -> None:
    """Clear errors, before any daemon is asked: an unknown format, a directory of memories, a
    data directory with transcripts (they go through the daemon's hooks), a directory without
    transcripts."""
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = [
        (["import", str(HEAVY), "--format", "csv"], "--format must be memories or claude-code"),
        (["import", str(FIX)], "is a directory: memories are imported from a file"),
        (["import", str(HEAVY), "--format", "claude-code", "--data-dir", str(tmp_path)], "--data-dir does not apply"),
        (["import", str(empty), "--format", "claude-code", "--url", "http://127.0.0.1:9"], "no Claude Code transcript"),
    ]
    for args, message in cases:
        r = runner.invoke(app, args, env={"MEMLANE_HOME": str(tmp_path / "home")})
        assert r.exit_code == 1 and message in flat(r), (args, r.output)


def test_a_subagent_ends_before_its_task_call_answers_and_turns_end_with_stop() -> None:
    """491e126e-excerpt: a custom slash command starts the turn (its expanded prompt is a meta line:
    no prompt hook); a Task call runs a Plan subagent (agentId afb92ff in the answer), then
    ExitPlanMode, and the user interrupts (no Stop). The prompt "create the beads" starts the next
    turn: four Bash calls and a summary, then Stop at that summary's line (31), where the
    transcript recorded the user's Stop hooks running."""
    stats = ReplayStats()
    evs = list(replay(SUBAGENT, stats=stats))
    seq = [(e.event, e.payload.get("tool_name")) for e in evs]
    assert seq[:7] == [
        ("session-start", None),
        ("pre-tool-use", "Task"),
        ("subagent-stop", None),
        ("post-tool-use", "Task"),
        ("pre-tool-use", "ExitPlanMode"),
        ("post-tool-use", "ExitPlanMode"),
        ("user-prompt-submit", None),
    ]
    sub = evs[2].payload
    assert (sub["hook_event_name"], sub["agent_id"], sub["agent_type"], sub["stop_hook_active"]) == (
        "SubagentStop",
        "afb92ff",
        "Plan",
        False,
    )
    assert evs[6].payload["prompt"] == "create the beads"
    assert seq[7:] == [("pre-tool-use", "Bash"), ("post-tool-use", "Bash")] * 4 + [
        ("stop", None),
        ("session-end", None),
    ]
    assert evs[-2].line == 31 and evs[-2].payload["hook_event_name"] == "Stop"
    # the context when the turn ended, as the Stop hook reads it from the transcript then
    assert evs[-2].context_tokens == usage_at(SUBAGENT, 31)
    assert (stats.prompts, stats.stops, stats.subagent_stops, stats.tool_calls) == (1, 1, 1, 6)
