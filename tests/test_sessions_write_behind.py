"""Write-behind session-start (sessions.inflight; ``SessionService.start(hold_write=True)``,
which the HTTP hook uses; here ``commit()`` right after the answer unless a test says
otherwise): the answer does not wait for the start's transaction, yet a second start of the
key, a prompt, feedback, session-end and the inspection API all see the record; a failed
commit is logged and frees the key. Real SQLite stores, real writer thread."""

from __future__ import annotations

import logging
import threading

from memlane.services.inputs import RememberInput
from memlane.sessions.inputs import EndInput, PromptInput, StartInput
from memlane.storage import sessions as sess_sql

NOW = "2026-03-01T12:00:00.000Z"


def _fill(c, n: int = 6) -> list[str]:
    return [
        c.memories.remember(
            RememberInput(content=f"note {i} about the deploy script and its flags", importance=0.5 + i / 20)
        ).id
        for i in range(n)
    ]


def _hold_writer(c) -> threading.Event:
    """Queue a write job that blocks the one writer until the returned event is set."""
    release = threading.Event()
    c.db.submit(lambda conn: release.wait(30))
    return release


def _start_committed(c, inp: StartInput):
    """A held start whose record is queued at once, as the hook does once its answer is sent."""
    res = c.sessions.start(inp, hold_write=True)
    if res.commit is not None:
        res.commit()
    return res


def _recorded(c, key: str) -> int:
    return c.db.read(
        lambda conn: conn.execute("SELECT count(*) FROM session_memories WHERE session_key = ?", (key,)).fetchone()[0]
    )


def test_answer_does_not_wait_for_the_commit(open_store) -> None:
    c = open_store()
    _fill(c)
    release = _hold_writer(c)
    try:
        res = _start_committed(c, StartInput("wb", now=NOW))
        assert res.status == "new" and res.candidate_count == 6 and res.injected
        assert _recorded(c, "wb") == 0  # answered while its transaction is still queued
        assert len(c.sessions.inflight) == 1
    finally:
        release.set()
    assert c.sessions.inflight.wait("wb") is True
    assert _recorded(c, "wb") == 6 and len(c.sessions.inflight) == 0


def test_prompt_right_after_the_answer_sees_what_the_start_showed(open_store) -> None:
    c = open_store()
    _fill(c)
    release = _hold_writer(c)
    res = _start_committed(c, StartInput("wb", now=NOW))
    shown = {x["id"] for x in res.injected}
    out: dict = {}
    t = threading.Thread(
        target=lambda: out.update(p=c.sessions.prompt(PromptInput("wb", prompt="the deploy script flags", now=NOW)))
    )
    t.start()
    t.join(0.3)
    assert t.is_alive()  # the prompt waits for the start's record before it reads
    release.set()
    t.join(30)
    prompt = out["p"]
    assert set(prompt.matched) & shown  # the prompt's recall found memories the start showed ...
    assert not set(prompt.injected) & shown  # ... and does not inject them a second time
    row = c.db.read(lambda conn: sess_sql.get_session(conn, "wb"))
    assert row is not None and row.started and row.prompt_count == 1


def test_concurrent_starts_of_one_key_give_one_new(open_store) -> None:
    c = open_store()
    _fill(c)
    release = _hold_writer(c)
    results: list = []
    threads = [
        threading.Thread(target=lambda: results.append(_start_committed(c, StartInput("same", now=NOW))))
        for _ in range(6)
    ]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(30)
    assert sorted(r.status for r in results) == ["existing"] * 5 + ["new"]
    assert c.sessions.get("same")["session"].candidate_count == 6
    assert _recorded(c, "same") == 6


def test_failed_commit_is_logged_and_frees_the_key(open_store, caplog) -> None:
    c = open_store()
    _fill(c)
    c.db.write(
        lambda conn: conn.execute(
            "CREATE TRIGGER no_candidates BEFORE INSERT ON session_memories BEGIN SELECT RAISE(ABORT, 'disk says no'); END"
        )
    )
    with caplog.at_level(logging.ERROR, logger="memlane.sessions.inflight"):
        res = _start_committed(c, StartInput("lost", now=NOW))
        assert res.status == "new"  # the answer went out before the failure
        assert c.sessions.inflight.wait("lost") is False
    assert any(
        "answered but not recorded" in r.getMessage() and "disk says no" in r.getMessage() for r in caplog.records
    )
    assert len(c.sessions.inflight) == 0
    assert c.db.read(lambda conn: sess_sql.get_session(conn, "lost")) is None  # one transaction: nothing half-kept
    c.db.write(lambda conn: conn.execute("DROP TRIGGER no_candidates"))
    again = _start_committed(c, StartInput("lost", now=NOW))
    assert again.status == "new"
    c.sessions.end(EndInput("lost", now=NOW))  # waits for the record, then ends it
    row = c.db.read(lambda conn: sess_sql.get_session(conn, "lost"))
    assert row is not None and row.started and row.ended_at is not None and _recorded(c, "lost") == 6


# -- hold_write: the record is queued only once the answer is out (the HTTP hook) -------------


def test_held_write_is_queued_by_commit(open_store) -> None:
    c = open_store()
    _fill(c)
    res = c.sessions.start(StartInput("held", now=NOW), hold_write=True)
    assert res.status == "new" and res.candidate_count == 6 and res.commit is not None
    c.db.write(lambda conn: None)  # the writer is idle: nothing of the start was queued
    assert _recorded(c, "held") == 0 and len(c.sessions.inflight) == 1
    res.commit()
    res.commit()  # idempotent
    assert c.sessions.inflight.wait("held") is True
    assert _recorded(c, "held") == 6 and len(c.sessions.inflight) == 0


def test_held_write_is_queued_by_the_keys_next_request(open_store) -> None:
    """No commit() (the response was never sent): the prompt that follows queues the record
    first, and sees what the start showed."""
    c = open_store()
    _fill(c)
    res = c.sessions.start(StartInput("held", now=NOW), hold_write=True)
    shown = {x["id"] for x in res.injected}
    c.sessions.prompt(PromptInput("held", prompt="the deploy script flags", now=NOW))
    assert _recorded(c, "held") >= 6
    rows = c.db.read(lambda conn: sess_sql.session_memories(conn, "held"))
    assert {r.memory_id for r in rows if r.was_injected} == shown


def test_second_start_of_a_held_key_is_existing(open_store) -> None:
    c = open_store()
    _fill(c)
    first = c.sessions.start(StartInput("held", now=NOW), hold_write=True)
    again = c.sessions.start(StartInput("held", now=NOW), hold_write=True)
    assert first.status == "new" and again.status == "existing" and again.commit is None
    assert _recorded(c, "held") == 6 and len(c.sessions.inflight) == 0


def test_close_queues_held_writes(open_store) -> None:
    c = open_store()
    _fill(c)
    c.sessions.start(StartInput("held", now=NOW), hold_write=True)
    home = c.settings.home
    c.close()
    again = open_store(home=home)
    assert _recorded(again, "held") == 6


def test_held_write_on_a_closed_database_is_logged_and_frees_the_key(open_store, caplog) -> None:
    c = open_store()
    _fill(c)
    res = c.sessions.start(StartInput("held", now=NOW), hold_write=True)
    c.db.close()
    with caplog.at_level(logging.ERROR, logger="memlane.sessions.inflight"):
        res.commit()
    assert len(c.sessions.inflight) == 0
    assert any("could not be recorded" in r.getMessage() for r in caplog.records)
