"""``memlane bench hooks``: the hook commands as Claude Code runs them, against a real daemon.

Claude Code starts a new process for every hook call: ``/bin/sh -c "<command>"`` with the hook
JSON on stdin, and waits for it. This benchmark does exactly that, for each event, with:

* ``new``: the command ``memlane connect claude-code`` installs now, the light client
  (``<python> -S -I -c '...' EVENT``, :func:`memlane.connectors.claude_settings.default_hook_cmd`,
  :mod:`memlane.hookclient`), given only ``MEMLANE_HOME`` (it finds the daemon's URL in the
  home's lock file);
* ``old``: ``<bin>/memlane hook EVENT``, the full CLI (given ``MEMLANE_PORT``, as it reads the
  URL from the settings);
* ``floor``: the same request (the body the hook client builds, token header included) sent
  by a raw HTTP client process, ``curl`` (or, when curl is missing, ``python -S -I`` with
  ``http.client``): what a process that does nothing but the request costs.
* ``python`` (daemon up only, a reference): ``<python> -c pass`` run the same way, what any
  Python hook pays before its first line runs.

A real daemon (``memlane serve``, the configured embedding provider, the token on) serves a
fresh store of ``memories`` synthetic memories of one project; the payloads carry a Claude Code
transcript under ``$HOME/.claude/projects`` (about ``transcript_turns`` turns), so the prompt
hook reads its tail for feedback and the session-end hook renders it. Each round runs
session-start, user-prompt-submit, pre-compact, pre-tool-use and post-tool-use (a Read of a
200-line file, the observer's feed; pre-tool-use finds no warning about it, the common case),
subagent-stop, stop (which reads the transcript's tail for its usage) and session-end of a
fresh session per command,
the commands interleaved so a change of machine load hits them alike. Then the daemon is
stopped and the same commands run against a port nobody listens on: every run must exit 0,
print nothing and leave one more event in the spool (the floor only shows what a refused
connection costs).

Measured per process: wall time from spawn to exit (ms), CPU time (user + system of the shell,
the command and GNU time, from ``os.wait4``, ms: on a loaded machine wall time mostly measures
the wait for a core, CPU time much less) and peak resident memory (MiB) of the shell and the
command, taken by GNU ``/usr/bin/time -f %M`` wrapped around the shell (a child
forked straight from this benchmark would report this process's own size: Linux carries the
parent's high-water mark across fork and exec into ``ru_maxrss``). Without GNU time the peak is
not reported. Reported: p50, p95 and max of each, and the ratio of each command's p50 to the
floor's.

Before measuring, memlane's modules are compiled to bytecode (what ``pip install`` does), so
``PYTHONDONTWRITEBYTECODE`` in the environment does not turn every run into a compile.
"""

from __future__ import annotations

import compileall
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

import memlane
from benchmarks.daemon import free_port, start_daemon
from benchmarks.metrics import latency_summary
from memlane.auth import CLIENT_HEADER, auth_headers
from memlane.connectors.claude_settings import HOOK_TIMEOUTS_S, default_hook_cmd, default_memlane_cmd
from memlane.connectors.events import CLAUDE_CODE_NAMES, from_claude_code
from memlane.connectors.spool import spool_dir_for, spooled_files
from memlane.hookclient import ENDPOINTS, build_body

#: Extra fields of each event's payload (besides session_id, cwd, transcript_path).
EVENTS: dict[str, dict[str, Any]] = {
    "session-start": {"source": "startup"},
    "user-prompt-submit": {"prompt": "how do we deploy the api service to staging?"},
    "pre-compact": {"trigger": "auto", "custom_instructions": ""},
    "pre-tool-use": {},  # the same Read call before it runs (no tool_response): _tool_call
    "post-tool-use": {},  # a Read call's tool_name / tool_input / tool_response: _tool_call
    "subagent-stop": {"stop_hook_active": False, "agent_id": "bench-agent", "agent_type": "general-purpose"},
    "stop": {"stop_hook_active": False},
    "session-end": {"reason": "prompt_input_exit"},
}
#: Lines of the file the benchmark's Read call returns in its tool_response (Claude Code sends the
#: whole read text to PostToolUse hooks; the client drops it before posting).
READ_LINES = 200
#: Targets of issue 43 for the new command: daemon up p50/p95 (ms) and peak memory (MiB);
#: daemon down p50 (ms).
TARGETS = {"up_p50_ms": 50.0, "up_p95_ms": 80.0, "peak_mib": 30.0, "down_p50_ms": 30.0}

_TOPICS = ["deploy", "database", "tests", "ci", "logging", "auth", "cache", "api", "frontend", "queue"]
_FACTS = [
    "the {t} service is deployed with ops/{t}.sh after the staging smoke tests pass",
    "for {t} the team prefers small pull requests reviewed by two people",
    "the {t} configuration lives in config/{t}.yaml and is validated at start-up",
    "a bug in {t} last spring came from a timezone mismatch between hosts",
    "{t} metrics are exported to the dashboard named {t}-overview",
    "the {t} module must stay compatible with Python 3.11",
    "when {t} fails on CI, rerun once before investigating: the runner is flaky",
    "the owner of {t} is the platform team; ask in #platform first",
]

Tick = Callable[[str, int, int], None]


def synthetic_memories(n: int) -> list[str]:
    """``n`` distinct, plausible project memories (no dataset needed)."""
    out = []
    for i in range(n):
        topic = _TOPICS[i % len(_TOPICS)]
        fact = _FACTS[(i // len(_TOPICS)) % len(_FACTS)].format(t=topic)
        out.append(f"{fact} (note {i})")
    return out


def write_transcript(path: Path, turns: int) -> None:
    """A Claude Code JSONL transcript: ``turns`` user/assistant exchanges with tool calls between
    (each assistant message with its ``usage``), the last assistant message rating a memory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(turns):
        lines.append(
            {"type": "user", "message": {"role": "user", "content": f"step {i}: please look at module {i % 17}"}}
        )
        lines.append(
            {
                "type": "assistant",
                "message": {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "text",
                            "text": f"Looking at module {i % 17}. " + "It reads the config and retries. " * 6,
                        },
                        {
                            "type": "tool_use",
                            "id": f"t{i}",
                            "name": "Read",
                            "input": {"file_path": f"/src/m{i % 17}.py"},
                        },
                    ],
                    # Claude Code's transcript lines carry the Messages API usage (the stop hook reads it)
                    "usage": {
                        "input_tokens": 3,
                        "cache_creation_input_tokens": 250,
                        "cache_read_input_tokens": 1200 * (i + 1),
                        "output_tokens": 60,
                    },
                },
            }
        )
        lines.append(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": f"t{i}", "content": "def f():\n    return 1\n" * 10}
                    ],
                },
            }
        )
    lines.append(
        {
            "type": "assistant",
            "message": {
                "role": "assistant",
                "content": [{"type": "text", "text": 'Done. {"memory_feedback": {"deadbeef": 0.5}}'}],
            },
        }
    )
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def gnu_time() -> str | None:
    """``/usr/bin/time`` when it is GNU time (it has ``-f``/``-o``), else None."""
    path = shutil.which("time", path="/usr/bin:/bin:/usr/local/bin")
    if not path:
        return None
    p = subprocess.run([path, "-f", "%M", "-o", os.devnull, "true"], capture_output=True)
    return path if p.returncode == 0 else None


class Run:
    """One measured process: ``wall_ms`` (spawn to exit), ``cpu_ms`` (user + system CPU of the
    shell, the command and GNU time when used: ~1 ms), ``peak_mib`` (None without GNU time),
    ``code``, ``out``, ``err``."""

    __slots__ = ("wall_ms", "cpu_ms", "peak_mib", "code", "out", "err")

    def __init__(
        self, wall_ms: float, cpu_ms: float, peak_mib: float | None, code: int, out: bytes, err: bytes
    ) -> None:
        self.wall_ms, self.cpu_ms, self.peak_mib = wall_ms, cpu_ms, peak_mib
        self.code, self.out, self.err = code, out, err


def run_measured(
    argv: list[str], stdin: bytes, env: dict[str, str], *, timer: str | None = None, timeout_s: float = 120.0
) -> Run:
    """Run ``argv`` as a new process with ``stdin`` piped in, as Claude Code runs a hook.

    CPU comes from ``os.wait4`` (the process and every descendant it waited for); the peak
    memory from GNU time's ``%M`` (see the module docstring for why not ``ru_maxrss``).

    Args:
        timer: GNU time's path (:func:`gnu_time`) to measure the peak memory with, or None.

    Raises:
        TimeoutError: still running after ``timeout_s`` (it is killed).
    """
    with (
        tempfile.NamedTemporaryFile(prefix="memlane-rss-") as rss_file,
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
    ):
        if timer:
            argv = [timer, "-f", "%M", "-o", rss_file.name, *argv]
        t0 = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, env=env)
        try:
            proc.stdin.write(stdin)  # type: ignore[union-attr]
        except BrokenPipeError:
            pass
        finally:
            proc.stdin.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                raise TimeoutError(f"{argv} still running after {timeout_s} s")
            time.sleep(0.0002)
        wall_ms = (time.perf_counter() - t0) * 1000
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here: Popen must not wait again
        peak = None
        if timer:
            lines = Path(rss_file.name).read_text().split()
            peak = int(lines[-1]) / 1024 if lines and lines[-1].isdigit() else None
        out.seek(0)
        err.seek(0)
        return Run(wall_ms, (usage.ru_utime + usage.ru_stime) * 1000, peak, proc.returncode, out.read(), err.read())


def _floor_cmd(url: str, endpoint: str, headers: dict[str, str]) -> list[str]:
    curl = shutil.which("curl")
    if curl:
        argv = [curl, "-s", "-o", "/dev/null", "-X", "POST", "--data-binary", "@-", "--max-time", "10"]
        for k, v in {"Content-Type": "application/json", **headers}.items():
            argv += ["-H", f"{k}: {v}"]
        return [*argv, url + endpoint]
    code = (
        "import http.client,sys,json;h=json.loads(sys.argv[3]);c=http.client.HTTPConnection(sys.argv[1],"
        "int(sys.argv[2]),timeout=10);c.request('POST',sys.argv[4],sys.stdin.buffer.read(),h);"
        "c.getresponse().read()"
    )
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return [
        sys.executable,
        "-S",
        "-I",
        "-c",
        code,
        host,
        port,
        json.dumps({"Content-Type": "application/json", **headers}),
        endpoint,
    ]


def _summary(runs: list[Run]) -> dict[str, Any]:
    peaks = [r.peak_mib for r in runs if r.peak_mib is not None]
    return {
        "runs": len(runs),
        "ms": latency_summary([r.wall_ms for r in runs]),
        "cpu_ms": latency_summary([r.cpu_ms for r in runs]),
        "peak_mib": {"p50": latency_summary(peaks)["p50"], "max": max(peaks)} if peaks else None,
    }


def compile_bytecode() -> None:
    """Compile memlane's modules to ``__pycache__`` as ``pip install`` does (quiet, idempotent)."""
    compileall.compile_dir(str(Path(memlane.__file__).parent), quiet=2, workers=1)


def run_hooks(
    *,
    runs: int = 20,
    old_runs: int = 5,
    memories: int = 200,
    transcript_turns: int = 150,
    embedding: str = "local",
    warmup: int = 2,
    progress: Tick | None = None,
) -> dict[str, Any]:
    """Run the benchmark (module docstring); returns the JSON report.

    Args:
        runs: measured rounds for the new command and the floor (each round: the four events).
        old_runs: measured rounds for the old command (the first ``old_runs`` rounds; it takes
            seconds per call).
        memories: memories in the store.
        transcript_turns: user/assistant exchanges in the session transcript.
        embedding: the daemon's embedding provider (``local`` or ``none``).
        warmup: unmeasured rounds first (each command), daemon up and down.

    Raises:
        RuntimeError: the daemon did not start, or a command failed a check (a non-zero exit, an
            error on stderr, a missing spool entry).
    """
    compile_bytecode()
    timer = gnu_time()
    report: dict[str, Any] = {
        "machine": {
            "cpus": os.cpu_count(),
            "loadavg_start": list(os.getloadavg()),
            "python": sys.version.split()[0],
            "peak_memory_by": "GNU time %M (shell + command)" if timer else None,
        },
        "settings": {
            "runs": runs,
            "old_runs": old_runs,
            "memories": memories,
            "transcript_turns": transcript_turns,
            "embedding": embedding,
            "warmup": warmup,
        },
        "targets": TARGETS,
    }
    with tempfile.TemporaryDirectory(prefix="memlane-bench-hooks-") as tmp:
        root = Path(tmp)
        home, user_home, project = root / "home", root / "user", root / "work" / "api"
        home.mkdir()
        (project / ".git").mkdir(parents=True)
        transcript = user_home / ".claude" / "projects" / "-work-api" / "session.jsonl"
        write_transcript(transcript, transcript_turns)
        report["settings"]["transcript_bytes"] = transcript.stat().st_size
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
        base_env.update(HOME=str(user_home), MEMLANE_HOME=str(home), MEMLANE_CONFIG=str(root / "no-config.yaml"))
        port = free_port()
        daemon = start_daemon(home, port, env={**base_env, "MEMLANE_EMBEDDING__PROVIDER": embedding})
        try:
            url = f"http://127.0.0.1:{port}"
            headers = {CLIENT_HEADER: "hook", **auth_headers(home)}
            with httpx.Client(base_url=url, headers=headers, timeout=300) as http:
                texts = synthetic_memories(memories)
                for i in range(0, len(texts), 256):
                    r = http.post(
                        "/api/memory/remember",
                        json={
                            "memories": [
                                {"content": t, "project": str(project.resolve()), "type": "fact", "importance": 0.7}
                                for t in texts[i : i + 256]
                            ]
                        },
                    )
                    r.raise_for_status()
            commands = {
                "new": (default_hook_cmd(), base_env),
                "old": ([*default_memlane_cmd(), "hook"], {**base_env, "MEMLANE_PORT": str(port)}),
            }
            report["commands"] = {name: shlex.join([*cmd, "EVENT"]) for name, (cmd, _) in commands.items()}
            report["up"] = _measure_up(
                commands, url, headers, project, transcript, runs, old_runs, warmup, timer, progress
            )
        finally:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        down_port = free_port()
        commands = {
            "new": (default_hook_cmd(), {**base_env, "MEMLANE_PORT": str(down_port)}),
            "old": ([*default_memlane_cmd(), "hook"], {**base_env, "MEMLANE_PORT": str(down_port)}),
        }
        report["down"] = _measure_down(
            commands,
            f"http://127.0.0.1:{down_port}",
            home,
            project,
            transcript,
            runs,
            old_runs,
            warmup,
            timer,
            progress,
        )
    report["machine"]["loadavg_end"] = list(os.getloadavg())
    report["ratios_p50_to_floor"] = {
        state: {
            event: {
                name: round(v[name]["ms"]["p50"] / v["floor"]["ms"]["p50"], 2)
                for name in ("new", "old", "python")
                if name in v
            }
            for event, v in report[state].items()
        }
        for state in ("up", "down")
    }
    report["targets_met"] = targets_met(report)
    return report


def _shell(cmd: list[str], event: str) -> list[str]:
    """How Claude Code runs a hook command: through the shell."""
    return ["/bin/sh", "-c", shlex.join([*cmd, event])]


def _tool_call(project: Path) -> dict[str, Any]:
    """A PostToolUse input for a Read of a 200-line file, in Claude Code's shape (tool_use_id,
    tool_response ``{"type": "text", "file": {...}}``)."""
    path = str(project / "src" / "service" / "handlers.py")
    content = "".join(f"    result_{i} = handle(request, option_{i})  # line {i}\n" for i in range(READ_LINES))
    return {
        "tool_name": "Read",
        "tool_input": {"file_path": path},
        "tool_use_id": "toolu_bench",
        "tool_response": {
            "type": "text",
            "file": {
                "filePath": path,
                "content": content,
                "numLines": READ_LINES,
                "startLine": 1,
                "totalLines": READ_LINES,
            },
        },
    }


def _payload(event: str, key: str, project: Path, transcript: Path) -> dict[str, Any]:
    extra: dict[str, Any]
    if event == "post-tool-use":
        extra = _tool_call(project)
    elif event == "pre-tool-use":
        extra = {k: v for k, v in _tool_call(project).items() if k != "tool_response"}
    else:
        extra = EVENTS[event]
    return {
        "session_id": key,
        "transcript_path": str(transcript),
        "cwd": str(project),
        "hook_event_name": CLAUDE_CODE_NAMES[event],
        "permission_mode": "default",
        **extra,
    }


def _check(name: str, event: str, code: int, err: bytes) -> None:
    if code != 0 or err.strip():
        raise RuntimeError(f"{name} {event}: exit {code}, stderr {err[:500]!r}")


def _measure_up(
    commands: dict[str, tuple[list[str], dict[str, str]]],
    url: str,
    headers: dict[str, str],
    project: Path,
    transcript: Path,
    runs: int,
    old_runs: int,
    warmup: int,
    timer: str | None,
    progress: Tick | None,
) -> dict[str, Any]:
    samples: dict[str, dict[str, list[Run]]] = {e: {n: [] for n in ("floor", *commands, "python")} for e in EVENTS}
    answered: dict[str, dict[str, int]] = {e: {n: 0 for n in commands} for e in EVENTS}
    total, done = (warmup + runs) * len(EVENTS), 0
    home_env = commands["new"][1]
    for rnd in range(warmup + runs):
        measured = rnd >= warmup
        for event in EVENTS:
            names = ["floor", "new", "python"] + (["old"] if rnd < warmup + old_runs else [])
            for name in names:
                raw = json.dumps(_payload(event, f"bench-{name}-{rnd}", project, transcript))
                if name == "floor":
                    body = build_body(
                        from_claude_code(event, json.loads(raw)), transcript_roots=[transcript.parents[1]]
                    )
                    argv, env = _floor_cmd(url, ENDPOINTS[event], headers), home_env
                    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
                elif name == "python":  # the interpreter alone: what any Python hook pays first
                    argv, env, data = _shell([sys.executable, "-c", "pass"], ""), home_env, raw.encode("utf-8")
                else:
                    cmd, env = commands[name]
                    argv, data = _shell(cmd, event), raw.encode("utf-8")
                run = run_measured(argv, data, env, timer=timer)
                _check(name, event, run.code, run.err)
                if name in commands:
                    answered[event][name] += bool(run.out.strip())
                if measured:
                    samples[event][name].append(run)
            done += 1
            if progress:
                progress(f"hooks, daemon up ({'measuring' if measured else 'warm-up'})", done, total)
    return {
        event: {**{name: _summary(rs) for name, rs in per.items() if rs}, "answers_printed": answered[event]}
        for event, per in samples.items()
    }


def _measure_down(
    commands: dict[str, tuple[list[str], dict[str, str]]],
    url: str,
    home: Path,
    project: Path,
    transcript: Path,
    runs: int,
    old_runs: int,
    warmup: int,
    timer: str | None,
    progress: Tick | None,
) -> dict[str, Any]:
    spool = spool_dir_for(home)
    samples: dict[str, dict[str, list[Run]]] = {e: {n: [] for n in ("floor", *commands)} for e in EVENTS}
    checks: dict[str, dict[str, dict[str, int]]] = {
        e: {n: {"exit0_empty": 0, "spooled": 0} for n in commands} for e in EVENTS
    }
    total, done = (warmup + runs) * len(EVENTS), 0
    for rnd in range(warmup + runs):
        measured = rnd >= warmup
        for event in EVENTS:
            names = ["floor", "new"] + (["old"] if rnd < warmup + old_runs else [])
            for name in names:
                raw = json.dumps(_payload(event, f"down-{name}-{rnd}", project, transcript)).encode("utf-8")
                if name == "floor":
                    argv, env = _floor_cmd(url, ENDPOINTS[event], {}), commands["new"][1]
                else:
                    cmd, env = commands[name]
                    argv = _shell(cmd, event)
                before = len(spooled_files(spool))
                run = run_measured(argv, raw, env, timer=timer)
                if name != "floor":
                    _check(name, event, run.code, run.err)
                    spooled = len(spooled_files(spool)) == before + 1
                    if not spooled or run.out.strip():
                        raise RuntimeError(
                            f"{name} {event} with the daemon down: stdout {run.out[:200]!r}, spooled {spooled}"
                        )
                    if measured:
                        checks[event][name]["exit0_empty"] += 1
                        checks[event][name]["spooled"] += 1
                if measured:
                    samples[event][name].append(run)
            done += 1
            if progress:
                progress(f"hooks, daemon down ({'measuring' if measured else 'warm-up'})", done, total)
    return {
        event: {
            **{name: _summary(rs) for name, rs in per.items() if rs},
            "checks": checks[event],
            "claude_code_timeout_s": HOOK_TIMEOUTS_S[CLAUDE_CODE_NAMES[event]],
        }
        for event, per in samples.items()
    }


def targets_met(report: dict[str, Any]) -> dict[str, bool]:
    """Each target of :data:`TARGETS` for the new command over every event: met or not."""
    up = [v["new"] for v in report["up"].values()]
    down = [v["new"] for v in report["down"].values()]
    return {
        "up_p50_ms": all(s["ms"]["p50"] <= TARGETS["up_p50_ms"] for s in up),
        "up_p95_ms": all(s["ms"]["p95"] <= TARGETS["up_p95_ms"] for s in up),
        "peak_mib": all(s["peak_mib"] is not None and s["peak_mib"]["max"] <= TARGETS["peak_mib"] for s in up + down),
        "down_p50_ms": all(s["ms"]["p50"] <= TARGETS["down_p50_ms"] for s in down),
    }
