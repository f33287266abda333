"""The observer's first half (issue 42 item 3): one test per row of the seed's signal taxonomy and
of the inference rules that are built, the scratchpad surviving a daemon kill, and session files
feeding the co-access graph."""

from __future__ import annotations

import json

import pytest

from conftest import api_client
from memlane.errors import ValidationError
from memlane.v3.observer import Observer


def calls(obs: Observer, session: str, seq: list[tuple], project: str = "p", t0: int = 1_000) -> list[list]:
    """Record ``(tool, file or None[, error])`` calls one second apart; returns each call's signals."""
    out = []
    for i, c in enumerate(seq):
        tool, path = c[0], c[1]
        err = c[2] if len(c) > 2 else None
        out.append(
            obs.record(
                session,
                tool,
                {"file_path": path} if path else {"command": "ls"},
                project=project,
                error=err,
                ts_ms=t0 + i * 1000,
            )
        )
    return out


def types(sig: list) -> list[str]:
    return [t for t, _ in sig]


# -- signals (seed "Signal Taxonomy", one test per type) -----------------------------------------
def test_file_access_signal(store):
    sig = calls(Observer(store.db), "s", [("Read", "src/a.py")])[0]
    assert sig == [("file_access", {"file_path": "src/a.py", "tool_name": "Read", "step_index": 1, "timestamp": 1000})]


def test_file_path_is_made_relative_to_the_working_directory(store):
    sig = Observer(store.db).record("s", "Edit", {"file_path": "/repo/src/a.py"}, cwd="/repo", ts_ms=1)
    assert sig[0][1]["file_path"] == "src/a.py"


def test_co_access_signal_within_three_steps(store):
    sigs = calls(
        Observer(store.db),
        "s",
        [("Read", "a.py"), ("Bash", None), ("Read", "b.py"), ("Bash", None), ("Bash", None), ("Read", "c.py")],
    )
    assert [d for t, d in sigs[2] if t == "co_access"] == [
        {"file_a": "a.py", "file_b": "b.py", "time_delta_ms": 2000, "step_delta": 2}
    ]
    assert [d["file_a"] for t, d in sigs[5] if t == "co_access"] == ["b.py"]  # a.py is 5 steps back


def test_error_retry_signal_counts_the_same_error(store):
    sigs = calls(
        Observer(store.db),
        "s",
        [
            ("Bash", None, "ModuleNotFoundError: foo"),
            ("Bash", None, "other"),
            ("Bash", None, "ModuleNotFoundError: foo"),
        ],
    )
    assert [d["retry_count"] for t, d in sigs[2] if t == "error_retry"] == [2]
    assert [d["retry_count"] for t, d in sigs[1] if t == "error_retry"] == [1]


def test_backtrack_signal_and_its_cause(store):
    obs = Observer(store.db)
    s1 = calls(obs, "s1", [("Edit", "a.py"), ("Read", "b.py"), ("Edit", "a.py")])
    assert [d for t, d in s1[2] if t == "backtrack"] == [
        {
            "edited_file_path": "a.py",
            "re_edited_within_steps": 2,
            "likely_cause": "wrong_assumption",
            "edited_between": [],
        }
    ]
    s2 = calls(obs, "s2", [("Edit", "a.py"), ("Edit", "b.py"), ("Edit", "a.py")])
    assert [d["likely_cause"] for t, d in s2[2] if t == "backtrack"] == ["cascading_change"]
    s3 = calls(obs, "s3", [("Edit", "a.py")] + [("Bash", None)] * 5 + [("Edit", "a.py")])
    assert "backtrack" not in types(s3[-1])  # 6 steps later: not a backtrack


def test_sequence_signal(store):
    sigs = calls(
        Observer(store.db),
        "s",
        [("Grep", None), ("Read", "a.py"), ("Edit", "a.py"), ("Grep", None), ("Read", "b.py"), ("Edit", "b.py")],
    )
    assert [d for t, d in sigs[5] if t == "sequence"] == [{"tool_sequence": ["Grep", "Read", "Edit"], "frequency": 2}]
    assert "sequence" not in types(sigs[2])


def test_time_anomaly_signal_on_the_fourth_read_without_edit(store):
    obs = Observer(store.db)
    sigs = calls(obs, "s", [("Read", "a.py")] * 5)
    assert [types(s).count("time_anomaly") for s in sigs] == [0, 0, 0, 1, 0]
    assert [d for t, d in sigs[3] if t == "time_anomaly"] == [{"file_path": "a.py", "read_count": 4, "dwell_ms": 3000}]
    edited = calls(
        obs, "s2", [("Read", "b.py"), ("Edit", "b.py"), ("Read", "b.py"), ("Read", "b.py"), ("Read", "b.py")]
    )
    assert not any("time_anomaly" in types(s) for s in edited)


# -- inference rules (seed "Memory Inference Rules", the rows that are built) ---------------------
def rules(obs: Observer, project: str = "p") -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for i in obs.inferences(project):
        out.setdefault(i["rule"], []).append(i)
    return out


def test_rule_co_access_in_three_sessions_is_a_causal_dependency(store):
    obs = Observer(store.db)
    for s in ("s1", "s2"):
        calls(obs, s, [("Read", "schema.sql"), ("Edit", "models.py")])
    assert "co_access_3_sessions" not in rules(obs)
    calls(obs, "s3", [("Edit", "models.py"), ("Bash", None), ("Read", "schema.sql")])
    [dep] = rules(obs)["co_access_3_sessions"]
    assert dep["type"] == "causal_dependency" and dep["related_files"] == ["models.py", "schema.sql"]


def test_rule_read_four_times_without_edit_is_a_module_insight(store):
    obs = Observer(store.db)
    calls(obs, "s", [("Read", "tricky.py")] * 4)
    [r] = rules(obs)["read_4_without_edit"]
    assert r["type"] == "module_insight" and r["related_files"] == ["tricky.py"]


def test_rule_same_error_three_times_is_an_error_pattern(store):
    obs = Observer(store.db)
    calls(obs, "s", [("Bash", None, "E: lock held")] * 2)
    assert "same_error_3_times" not in rules(obs)
    calls(obs, "s", [("Bash", None, "E: lock held")])
    [r] = rules(obs)["same_error_3_times"]
    assert r["type"] == "error_pattern" and "E: lock held" in r["content"]


def test_rule_re_edit_within_five_steps_is_a_gotcha(store):
    obs = Observer(store.db)
    calls(obs, "s", [("Edit", "a.py"), ("Read", "x.py"), ("Edit", "a.py")])
    [r] = rules(obs)["re_edit_within_5"]
    assert r["type"] == "gotcha" and r["related_files"] == ["a.py"]


def test_rule_cascading_backtrack_is_a_gotcha_with_related_files(store):
    obs = Observer(store.db)
    calls(obs, "s", [("Edit", "api.py"), ("Edit", "client.py"), ("Edit", "api.py")])
    [r] = rules(obs)["backtrack_cascading"]
    assert r["type"] == "gotcha" and r["related_files"] == ["api.py", "client.py"]


def test_rule_file_in_80_percent_of_module_sessions_is_a_prefetch_pattern(store):
    obs = Observer(store.db)
    for i in range(5):
        calls(obs, f"s{i}", [("Read", "auth/config.py"), ("Edit", f"auth/h{i}.py")])
    calls(obs, "s5", [("Edit", "auth/h9.py")])  # 5 of 6 sessions: 83 %
    [r] = rules(obs)["accessed_in_80pct_of_module_sessions"]
    assert r["type"] == "prefetch_pattern" and r["related_files"] == ["auth/config.py"]
    calls(obs, "s6", [("Edit", "auth/h8.py")])  # 5 of 7: 71 %
    assert "accessed_in_80pct_of_module_sessions" not in rules(obs)


def test_bad_calls_are_refused(store):
    obs = Observer(store.db)
    with pytest.raises(ValidationError):
        obs.record("", "Read", {})
    with pytest.raises(ValidationError):
        obs.record("s", "Read", {"file_path": "a\x00b"})
    sig = obs.record("s", "Bash", {}, error="bad \x00 output \udc80")  # tool output is cleaned, not refused
    assert types(sig) == ["error_retry"]


# -- scratchpad over HTTP, across a daemon kill -------------------------------------------------
def test_scratchpad_survives_a_daemon_kill(start_daemon, tmp_path):
    home = tmp_path / "home"
    d = start_daemon(home, provider="none")
    with d.client() as c:
        for f in ["src/a.py", "src/b.py", "src/a.py"]:
            r = c.post(
                "/api/v3/observer/tool-use",
                json={
                    "session_id": "live",
                    "tool_name": "Edit",
                    "tool_input": {"file_path": f"/repo/{f}"},
                    "cwd": "/repo",
                    "project": "demo",
                    "hook_event_name": "PostToolUse",
                    "transcript_path": "/x.jsonl",
                },
            )
            assert r.status_code == 200, r.text
        assert [s["type"] for s in r.json()["signals"]] == ["file_access", "co_access", "backtrack"]
    d.kill()  # SIGKILL: no shutdown path runs
    d2 = start_daemon(home, provider="none")
    with d2.client() as c:
        sig = c.get("/api/v3/observer/signals", params={"session_id": "live"}).json()["signals"]
        assert [s["type"] for s in sig] == [
            "file_access",
            "file_access",
            "co_access",
            "file_access",
            "co_access",
            "backtrack",
        ]
        end = c.post("/api/v3/observer/session-end", json={"session_id": "live", "project": "demo"}).json()
        assert end["files"] == 2 and end["promotion"]["outcome"] == "passed"  # one backtrack: below frequency
        assert end["promotion"]["dropped"]["frequency"] == 1 and end["promotion"]["promoted"] == []
        pred = c.get("/api/v3/coaccess/predict", params={"file": "src/a.py", "project": "demo", "k": 1}).json()
        assert pred["predictions"][0]["file"] == "src/b.py"


def test_observer_routes_refuse_bad_input(store):
    client = api_client(store)
    assert client.post("/api/v3/observer/tool-use", json={"tool_name": "Read"}).status_code == 422
    r = client.post(
        "/api/v3/observer/tool-use",
        headers={"content-type": "application/json"},
        content=json.dumps({"session_id": "s", "tool_name": "Read", "tool_input": {"file_path": "\ud800"}}),
    )
    assert r.status_code == 422 and r.json()["error"]["code"] == "validation_error"
    err = client.post(
        "/api/v3/observer/tool-use",
        json={
            "session_id": "s",
            "tool_name": "Bash",
            "tool_input": {},
            "tool_response": {"is_error": True, "content": "boom"},
        },
    )
    assert [s["type"] for s in err.json()["signals"]] == ["error_retry"]
    assert client.get("/api/v3/observer/inferences").json() == {"inferences": []}
