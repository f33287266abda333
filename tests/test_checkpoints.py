"""Session checkpoints on real SQLite files (memory-pipeline-v2.md "Session Checkpoints"): the
buffered flush and its merge rules, redaction before storage, the per-session cap, pruning, the
recovery digest, the periodic trigger, the background flush thread and flush-on-close."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlane.config import load_settings
from memlane.config.continuity import SessionCheckpointSettings
from memlane.container import Container, open_container
from memlane.errors import StorageError, ValidationError
from memlane.sessions.checkpoints import (
    MAX_QUERIES,
    MAX_REMEMBERS,
    TRIGGERS,
    TRUNCATED,
    SessionCheckpointService,
    format_periodic_digest,
    format_pre_compaction_digest,
    format_session_end_digest,
    normalize_project,
    truncate_lines,
)
from memlane.storage import session_checkpoints as store

T0 = 1_800_000_000.0  # 2027-01-15, seconds
DAY = 86_400.0


class FakeClock:
    """A clock (seconds) the test moves by hand."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def container(tmp_path) -> Iterator[Container]:
    c = open_container(load_settings(home=tmp_path / "home", embedding={"provider": "none"}))
    yield c
    c.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make(container, clock):
    """Factory for services on ``container.db``; every service is closed before the database."""
    made: list[SessionCheckpointService] = []

    def factory(flush_interval_s: float = 3600.0, **settings) -> SessionCheckpointService:
        svc = SessionCheckpointService(
            container.db, SessionCheckpointSettings(**settings), clock=clock, flush_interval_s=flush_interval_s
        )
        made.append(svc)
        return svc

    yield factory
    for svc in made:
        svc.close()


@pytest.fixture
def svc(make) -> SessionCheckpointService:
    return make()


def rows(container: Container, session_key: str) -> list[store.SessionCheckpoint]:
    """Checkpoints of a session, oldest first."""
    return container.db.read(lambda c: store.list_for_session(c, session_key))[::-1]


def total(container: Container) -> int:
    return container.db.read(lambda c: store.count(c))


# -- the buffered flush and its merge rules ------------------------------------------------------


def test_two_triggers_in_one_window_merge(svc, container, clock):
    svc.queue(
        "s1",
        "periodic",
        harness="claude-code",
        project="/work/App",
        prompt_count_delta=2,
        queries=["how do I run tests", "where is the config"],
        remembers=["uses pytest"],
    )
    clock.advance(1.0)
    svc.queue(
        "s1",
        "explicit",
        harness="claude-code",
        project="/work/App",
        prompt_count_delta=3,
        queries=["where is the config", "what port"],
        remembers=["port 7437"],
    )
    assert svc.pending_sessions() == ["s1"]
    assert total(container) == 0  # nothing written before the flush
    assert svc.flush() == 1
    [cp] = rows(container, "s1")
    assert cp.trigger == "explicit"
    assert cp.prompt_count == 5
    assert cp.memory_queries == ("how do I run tests", "where is the config", "what port")
    assert cp.recent_remembers == ("uses pytest", "port 7437")
    assert cp.project == "/work/App" and cp.project_normalized == "/work/app" and cp.harness == "claude-code"
    assert cp.created_at == "2027-01-15T08:00:01.000Z"  # the last trigger of the window
    for text in (
        "/work/App",
        "Prompts: 5 since last checkpoint",
        "how do I run tests",
        "what port",
        "remembered: port 7437",
    ):
        assert text in cp.digest
    assert svc.pending_sessions() == []


def test_merge_caps_keep_the_most_recent(svc, container):
    svc.queue("s", "periodic", queries=[f"q{i}" for i in range(15)], remembers=[f"r{i}" for i in range(8)])
    svc.queue("s", "periodic", queries=[f"q{i}" for i in range(15, 30)], remembers=[f"r{i}" for i in range(8, 16)])
    svc.flush()
    [cp] = rows(container, "s")
    assert cp.memory_queries == tuple(f"q{i}" for i in range(30 - MAX_QUERIES, 30))
    assert cp.recent_remembers == tuple(f"r{i}" for i in range(16 - MAX_REMEMBERS, 16))


def test_a_repeated_query_moves_to_its_latest_position(svc, container):
    svc.queue("s", "periodic", queries=["a", "b", "c"])
    svc.queue("s", "periodic", queries=["a", "d"])
    svc.flush()
    assert rows(container, "s")[0].memory_queries == ("b", "c", "a", "d")


BUFFERED = [t for t in TRIGGERS if t != "pre_compaction"]  # pre_compaction is written at once


@pytest.mark.parametrize("first", BUFFERED)
@pytest.mark.parametrize("second", TRIGGERS)
def test_most_significant_trigger_is_kept(make, container, first, second):
    svc = make()
    svc.queue("s", first)
    svc.queue("s", second)
    svc.flush()
    [cp] = rows(container, "s")
    assert cp.trigger == max(first, second, key=TRIGGERS.index)


def test_trigger_order_is_the_seed_order():
    assert TRIGGERS == ("periodic", "agent", "explicit", "pre_compaction", "session_end")


def test_separate_sessions_are_not_merged(svc, container):
    svc.queue("a", "periodic", prompt_count_delta=1, queries=["qa"], project="/p")
    svc.queue("b", "periodic", prompt_count_delta=2, queries=["qb"], project="/p")
    assert svc.flush() == 2
    assert [cp.memory_queries for cp in rows(container, "a")] == [("qa",)]
    assert [cp.memory_queries for cp in rows(container, "b")] == [("qb",)]
    assert rows(container, "b")[0].prompt_count == 2


def test_separate_windows_are_separate_checkpoints(svc, container, clock):
    svc.queue("s", "periodic", prompt_count_delta=1)
    svc.flush()
    clock.advance(60)
    svc.queue("s", "periodic", prompt_count_delta=4)
    svc.flush()
    assert [cp.prompt_count for cp in rows(container, "s")] == [1, 4]
    assert "5 in session" in rows(container, "s")[1].digest


def test_pre_compaction_is_written_at_once(svc, container):
    svc.queue("s", "periodic", queries=["earlier"])
    svc.queue("s", "pre_compaction", project="/p", context="we were refactoring db.py", queries=["now"])
    [cp] = rows(container, "s")  # no flush() call
    assert cp.trigger == "pre_compaction"
    assert cp.memory_queries == ("earlier", "now")
    assert "Pre-compaction" in cp.digest and "we were refactoring db.py" in cp.digest


def test_session_end_digest_has_total_prompts_and_duration(svc, container, clock):
    svc.queue("s", "periodic", project="/p", prompt_count_delta=4)
    svc.flush()
    clock.advance(14 * 60 + 5)
    svc.queue("s", "session_end", project="/p", prompt_count_delta=3)
    svc.flush()
    end = rows(container, "s")[-1]
    assert end.trigger == "session_end"
    assert "Total prompts: 7" in end.digest
    assert "Duration: 14m 05s" in end.digest


def test_agent_summary_is_kept_in_the_digest(svc, container):
    svc.queue("s", "agent", context="Goal: ship checkpoints. Next: wire the container.")
    svc.flush()
    assert "Goal: ship checkpoints." in rows(container, "s")[0].digest


def test_queue_validation(svc):
    with pytest.raises(ValidationError):
        svc.queue("", "periodic")
    with pytest.raises(ValidationError):
        svc.queue("s", "hourly")
    with pytest.raises(ValidationError):
        svc.queue("s", "periodic", prompt_count_delta=-1)
    assert svc.pending_sessions() == []


def test_disabled_service_writes_nothing(make, container):
    svc = make(enabled=False)
    assert svc.queue("s", "session_end", queries=["x"]) is False
    svc.flush()
    assert total(container) == 0
    assert svc.should_checkpoint_periodic("s", 1000) is False
    assert svc.recovery_digest(session_key="s") == ""


# -- redaction -----------------------------------------------------------------------------------


def test_secrets_are_redacted_before_storage(svc, container):
    svc.queue(
        "s",
        "periodic",
        project="/p",
        queries=["call it with Authorization: Bearer abc.def-123456", "key sk-ant-api03-SECRETabc123xyz"],
        remembers=["export OPENAI_API_KEY=sk-proj-ABCdef1234567890ghijKLM", 'db {"password": "hunter2"}'],
    )
    svc.queue("s", "pre_compaction", context="token: ghp_" + "Zz9" * 12)
    raw = container.db.read(lambda c: [tuple(r) for r in c.execute("SELECT * FROM session_checkpoints")])
    blob = json.dumps(raw)
    for secret in ("abc.def-123456", "SECRETabc123xyz", "ABCdef1234567890", "hunter2", "Zz9Zz9"):
        assert secret not in blob
    [cp] = rows(container, "s")
    assert cp.memory_queries[0] == "call it with Authorization: Bearer [REDACTED]"
    assert cp.recent_remembers[1] == 'db {"password": "[REDACTED]"}'
    assert "[REDACTED]" in cp.digest


# -- cap and pruning -----------------------------------------------------------------------------


def test_per_session_cap_deletes_the_oldest(make, container, clock):
    svc = make(max_checkpoints_per_session=3)
    for i in range(5):
        svc.queue("s", "periodic", queries=[f"q{i}"])
        svc.queue("other", "periodic", queries=[f"o{i}"]) if i < 2 else None
        svc.flush()
        clock.advance(10)
    assert [cp.memory_queries for cp in rows(container, "s")] == [("q2",), ("q3",), ("q4",)]
    assert len(rows(container, "other")) == 2
    assert container.db.read(lambda c: store.count(c, "s")) == 3


def test_prune_hard_deletes_older_than_retention(make, container, clock):
    svc = make(retention_days=7)
    for age_days in (10, 8, 6, 1):
        clock.t = T0 - age_days * DAY
        svc.queue(f"s{age_days}", "periodic")
        svc.flush()
    assert total(container) == 4
    assert svc.prune(now=T0) == 2
    left = container.db.read(lambda c: [r[0] for r in c.execute("SELECT session_key FROM session_checkpoints")])
    assert sorted(left) == ["s1", "s6"]
    assert svc.prune(now=T0) == 0
    clock.t = T0 + 3 * DAY
    assert svc.prune() == 1  # default now: the clock (s6 is now 9 days old)


# -- recovery digest -----------------------------------------------------------------------------


def test_recovery_by_session_then_by_project(svc, container, clock):
    svc.queue("old", "session_end", project="C:\\Work\\App\\", queries=["old work"])
    svc.flush()
    clock.advance(60)
    svc.queue("s1", "periodic", project="/elsewhere", queries=["s1 work"])
    svc.flush()
    assert "s1 work" in svc.recovery_digest(session_key="s1", project="c:/work/app")  # session wins
    by_project = svc.recovery_digest(session_key="new-session", project="  c:/WORK/app/ ")
    assert "old work" in by_project
    assert by_project == rows(container, "old")[0].digest
    assert svc.recovery_digest(session_key="nobody") == ""
    assert svc.recovery_digest(project="/nowhere") == ""
    assert svc.recovery_digest() == ""


def test_recovery_digest_respects_the_budget(make, container):
    svc = make(recovery_budget_chars=300)
    svc.queue("s", "periodic", project="/p", queries=[f"query number {i} " + "x" * 40 for i in range(20)])
    svc.flush()
    full = rows(container, "s")[0].digest
    assert len(full) > 300
    out = svc.recovery_digest(session_key="s")
    assert len(out) <= 300 and out.endswith("\n" + TRUNCATED)
    kept = out[: -len(TRUNCATED) - 1]
    assert full.startswith(kept + "\n")  # cut on a line boundary
    small = svc.recovery_digest(session_key="s", budget_chars=120)
    assert len(small) <= 120 and small.endswith(TRUNCATED)
    assert svc.recovery_digest(session_key="s", budget_chars=100_000) == full


@given(st.text(max_size=400), st.integers(0, 500))
def test_truncate_lines_never_exceeds_the_budget(text, budget):
    out = truncate_lines(text, budget)
    assert len(out) <= max(budget, 0)
    if len(text) <= budget:
        assert out == text


# -- periodic trigger ----------------------------------------------------------------------------


def test_periodic_by_prompt_count(make):
    svc = make(prompt_interval=10)
    due = [n for n in range(1, 31) if svc.should_checkpoint_periodic("s", n, now=T0)]
    assert due == [10, 20, 30]


def test_periodic_by_time(make, clock):
    svc = make(time_interval_ms=60_000, prompt_interval=1000)
    assert svc.should_checkpoint_periodic("s", 1, now=T0) is False  # first sight starts the clock
    assert svc.should_checkpoint_periodic("s", 2, now=T0 + 59.9) is False
    assert svc.should_checkpoint_periodic("s", 3, now=T0 + 60.0) is True
    assert svc.should_checkpoint_periodic("s", 4, now=T0 + 61) is False  # a new interval began
    clock.t = T0 + 100
    svc.queue("s", "explicit")  # any checkpoint restarts the interval
    assert svc.should_checkpoint_periodic("s", 5, now=T0 + 121) is False
    assert svc.should_checkpoint_periodic("s", 6, now=T0 + 160) is True
    assert svc.should_checkpoint_periodic("s", 7) is False  # default now: the clock


def test_periodic_after_restart_uses_the_stored_checkpoint(make, container, clock):
    first = make(time_interval_ms=60_000)
    first.queue("s", "periodic")
    first.flush()
    restarted = make(time_interval_ms=60_000, prompt_interval=10)
    assert restarted.should_checkpoint_periodic("s", 13, now=T0 + 30) is False
    assert restarted.should_checkpoint_periodic("s", 14, now=T0 + 61) is True
    assert restarted.should_checkpoint_periodic("s", 20, now=T0 + 62) is False  # 14 -> 20 is 6 prompts
    assert restarted.should_checkpoint_periodic("s", 24, now=T0 + 63) is True


# -- the background thread and close -------------------------------------------------------------


def test_close_flushes_everything_queued(make, container):
    svc = make(flush_interval_s=3600)
    for i in range(5):
        svc.queue(f"s{i}", "periodic", queries=[f"q{i}"])
        svc.queue(f"s{i}", "session_end", prompt_count_delta=i)
    svc.close()
    assert total(container) == 5
    assert {cp.trigger for i in range(5) for cp in rows(container, f"s{i}")} == {"session_end"}
    svc.close()  # idempotent
    svc.queue("late", "periodic")  # after close: written at once
    assert len(rows(container, "late")) == 1


def test_background_thread_flushes(make, container):
    svc = make(flush_interval_s=0.05)
    svc.queue("bg", "periodic", queries=["written by the thread"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not rows(container, "bg"):
        time.sleep(0.02)
    [cp] = rows(container, "bg")
    assert cp.memory_queries == ("written by the thread",)
    assert svc.pending_sessions() == []


def test_one_flush_thread_per_service(make):
    import threading

    svc = make(flush_interval_s=3600)
    before = {t.name for t in threading.enumerate()}.__contains__("memlane-checkpoints")
    for i in range(20):
        svc.queue(f"s{i}", "periodic")
    names = [t.name for t in threading.enumerate() if t.name == "memlane-checkpoints"]
    assert len(names) == 1 + int(before)


# -- storage, settings, formatters, helpers ------------------------------------------------------


def test_storage_round_trip(container):
    def job(c):
        ids = [
            store.insert(
                c,
                session_key="k",
                harness=None,
                project=None,
                project_normalized=None,
                trigger="explicit",
                digest=f"d{i}",
                prompt_count=i,
                memory_queries=["q"],
                recent_remembers=[],
                created_at=f"2027-01-0{i + 1}T00:00:00.000Z",
            )
            for i in range(3)
        ]
        return ids

    ids = container.db.write(job)
    assert [cp.id for cp in container.db.read(lambda c: store.list_for_session(c, "k"))] == ids[::-1]
    assert container.db.read(lambda c: store.list_for_session(c, "k", limit=1))[0].digest == "d2"
    assert container.db.read(lambda c: store.latest_for_session(c, "k")).id == ids[2]
    assert container.db.read(lambda c: store.latest_for_project(c, "/x")) is None
    assert container.db.write(lambda c: store.enforce_cap(c, "k", 1)) == 2
    exactly = datetime(2027, 1, 10, tzinfo=UTC)  # the row is exactly 7 days old: kept
    assert container.db.write(lambda c: store.prune_older_than(c, 7, exactly)) == 0
    now = datetime(2027, 1, 10, 0, 0, 0, 1000, tzinfo=UTC)  # 7 days + 1 ms: deleted
    assert container.db.write(lambda c: store.prune_older_than(c, 7, now)) == 1
    assert container.db.read(lambda c: store.count(c)) == 0
    with pytest.raises(StorageError, match="CHECK constraint"):
        container.db.write(
            lambda c: store.insert(
                c,
                session_key="k",
                harness=None,
                project=None,
                project_normalized=None,
                trigger="bogus",
                digest="",
                prompt_count=0,
                memory_queries=[],
                recent_remembers=[],
                created_at="2027-01-01T00:00:00.000Z",
            )
        )


def test_settings_defaults_aliases_and_ranges():
    s = SessionCheckpointSettings()
    assert (
        s.enabled,
        s.prompt_interval,
        s.time_interval_ms,
        s.max_checkpoints_per_session,
        s.retention_days,
        s.recovery_budget_chars,
    ) == (True, 10, 900_000, 50, 7, 2000)
    assert SessionCheckpointSettings(promptInterval=5, timeIntervalMs=60_000).prompt_interval == 5
    for bad in (
        {"prompt_interval": 0},
        {"prompt_interval": 1001},
        {"time_interval_ms": 59_999},
        {"time_interval_ms": 3_600_001},
        {"max_checkpoints_per_session": 501},
        {"retention_days": 0},
        {"retention_days": 91},
        {"recovery_budget_chars": 199},
        {"recovery_budget_chars": 10_001},
    ):
        with pytest.raises(pydantic.ValidationError):
            SessionCheckpointSettings(**bad)
    assert all(f.description for f in SessionCheckpointSettings.model_fields.values())


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("/Work/App/", "/work/app"),
        ("C:\\Users\\Me\\Proj\\", "c:/users/me/proj"),
        ("  my   project  ", "my project"),
        ("/", "/"),
        ("///", "/"),
        ("", None),
        ("   ", None),
        (None, None),
    ],
)
def test_normalize_project(raw, expected):
    assert normalize_project(raw) == expected
    assert SessionCheckpointService.normalize_project(raw) == expected


def test_formatters():
    periodic = format_periodic_digest(
        project="/p", prompt_count=3, duration_s=3725, queries=["a\nb"], remembers=["r"], total_prompts=12
    )
    assert periodic.startswith("## Session checkpoint (periodic)\n- Project: /p\n")
    assert "- Prompts: 3 since last checkpoint, 12 in session" in periodic
    assert "- Duration: 1h 02m" in periodic and "1. a b" in periodic and "- remembered: r" in periodic
    empty = format_periodic_digest(project=None, prompt_count=0, duration_s=None)
    assert "Project: unknown" in empty and "Duration: unknown" in empty and empty.count("- none") == 2
    pre = format_pre_compaction_digest(project="/p", prompt_count=1, duration_s=42, context="ctx line")
    assert pre.startswith("## Pre-compaction checkpoint") and pre.endswith("### Session context\nctx line")
    assert "Duration: 42s" in pre
    end = format_session_end_digest(project="/p", total_prompts=9, duration_s=60, queries=["x" * 1000])
    assert end.startswith("## Session end") and "Total prompts: 9" in end and "Duration: 1m 00s" in end
    assert max(len(line) for line in end.splitlines()) < 320  # long items are cut


def test_summary_prompt_is_short_concrete_and_redacted(svc):
    p = svc.summary_prompt("s1", "/work/app", "we set password=hunter2 in settings.py")
    for word in ("Goal", "Decisions", "Open tasks", "Files touched", "Remember", "/work/app", "settings.py"):
        assert word in p
    assert "hunter2" not in p
    assert len(svc.summary_prompt("s1", None, None)) < 700


def test_duration_and_total_come_from_the_sessions_row(svc, container, clock):
    from memlane.storage import sessions as sess_sql

    def job(c):
        sess_sql.insert_session(
            c,
            key="s",
            project="/p",
            harness="h",
            cwd=None,
            context=None,
            started_at="2027-01-15T07:30:00.000Z",
            predictor_state="collecting",
        )
        c.execute("UPDATE sessions SET prompt_count = 40 WHERE session_key = 's'")

    container.db.write(job)
    svc.queue("s", "session_end", project="/p", prompt_count_delta=2)
    svc.flush()
    digest = rows(container, "s")[0].digest
    assert "Duration: 30m 00s" in digest  # T0 is 08:00:00Z
    assert "Total prompts: 40" in digest


def test_concurrent_queues_lose_nothing(make, container):
    import threading

    svc = make(flush_interval_s=0.01)

    def worker(n: int) -> None:
        for i in range(50):
            svc.queue(f"s{n % 3}", "periodic", prompt_count_delta=1, queries=[f"w{n}-{i}"])

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    svc.close()
    counted = container.db.read(lambda c: c.execute("SELECT sum(prompt_count) FROM session_checkpoints").fetchone()[0])
    assert counted == 300


class FailingDb:
    """A database whose writes always fail."""

    def __init__(self) -> None:
        self.writes = 0

    def write(self, fn):
        from memlane.errors import StorageError

        self.writes += 1
        raise StorageError("disk full")

    def read(self, fn):  # pragma: no cover - not used
        raise AssertionError


def test_failed_flush_keeps_the_batch_then_gives_up(clock):
    from memlane.errors import StorageError
    from memlane.sessions.checkpoints import MAX_FLUSH_ATTEMPTS

    db = FailingDb()
    svc = SessionCheckpointService(db, clock=clock, flush_interval_s=3600)  # type: ignore[arg-type]
    svc.queue("s", "periodic", prompt_count_delta=1)
    for _ in range(1, MAX_FLUSH_ATTEMPTS):
        with pytest.raises(StorageError):
            svc.flush()
        assert svc.pending_sessions() == ["s"]
    with pytest.raises(StorageError):
        svc.flush()
    assert svc.pending_sessions() == []  # dropped (and logged) after the last attempt
    svc.close()
    assert db.writes == MAX_FLUSH_ATTEMPTS
