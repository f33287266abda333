"""``memlane bench hooks``: the hook command with the daemon down.

Runs ``memlane hook <event>`` as a real subprocess, ``runs`` times per event, against a port
nobody listens on, with a realistic Claude Code payload on stdin. Checks each run: exit code 0,
empty stdout, and one more event in the spool; reports wall time (s) against the hook timeout
Claude Code enforces (the ``timeout`` memlane writes into settings.json).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from memlane.bench.latency import free_port
from memlane.bench.metrics import latency_summary
from memlane.connectors.claude_settings import HOOK_TIMEOUTS_S
from memlane.connectors.spool import spool_dir_for

EVENTS = {
    "session-start": {"hook_event_name": "SessionStart", "source": "startup"},
    "user-prompt-submit": {"hook_event_name": "UserPromptSubmit", "prompt": "how do we deploy to staging?"},
    "session-end": {"hook_event_name": "SessionEnd", "reason": "prompt_input_exit"},
    "pre-compact": {"hook_event_name": "PreCompact", "trigger": "auto", "custom_instructions": ""},
}


def run_hooks_down(runs: int = 10, progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Time ``memlane hook <event>`` with no daemon; returns per-event wall times and checks."""
    out: dict[str, Any] = {"events": {}}
    with tempfile.TemporaryDirectory(prefix="memlane-hooks-") as tmp:
        home = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
        env.update(MEMLANE_HOME=str(home), MEMLANE_PORT=str(free_port()), MEMLANE_CONFIG=str(home / "none.yaml"))
        spool = spool_dir_for(home)
        done, total = 0, runs * len(EVENTS)
        for event, extra in EVENTS.items():
            times, empty, spooled = [], 0, 0
            for i in range(runs):
                payload = {"session_id": f"bench-{event}-{i}", "transcript_path": str(home / "none.jsonl"),
                           "cwd": str(home), **extra}
                before = len(list(spool.glob("*.json"))) if spool.exists() else 0
                t = time.perf_counter()
                p = subprocess.run([sys.executable, "-m", "memlane", "hook", event], input=json.dumps(payload),
                                   capture_output=True, text=True, env=env, timeout=60)
                times.append(time.perf_counter() - t)
                after = len(list(spool.glob("*.json"))) if spool.exists() else 0
                empty += p.returncode == 0 and p.stdout.strip() == ""
                spooled += after == before + 1
                done += 1
                if progress:
                    progress(f"hook {event} (daemon down)", done, total)
            limit = HOOK_TIMEOUTS_S[extra["hook_event_name"]]
            out["events"][event] = {"runs": runs, "exit0_and_empty": empty, "spooled": spooled,
                                    "ms": latency_summary([x * 1000 for x in times]), "max_s": max(times),
                                    "timeout_s": limit, "under_timeout": all(x < limit for x in times)}
    return out
