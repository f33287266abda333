"""The canary set's refresh on a real store (storage.predictor.refresh_canary and
swap_canary_members).

It grows with the data by adding members (the ones it holds stay held out) and, on the weekly
refresh, replaces its oldest members (at most ``max_replaced``) with the high-confidence
sessions since its newest member (seed "Canary Evaluation Set"); the week is counted between
sessions. Until 2026-11-23 growing by one member replaced every member: sessions the live
model had trained on joined the canary, and the NDCG gate then compared the live model
in-sample against a held-out candidate.
"""

from __future__ import annotations

import numpy as np

from memlane.services.predictor_training import canary_refresh_due
from memlane.storage import predictor as pred_sql
from memlane.storage.db import Database
from memlane.storage.migrations import migrate
from predictor_store_helpers import insert_memory, insert_scored_session

MODEL_ID = "test-8"
AT = "2026-02-01T08:00:00.000Z"


def _store(tmp_path, n_sessions: int) -> Database:
    db = Database(tmp_path / "memlane.db")
    migrate(db)
    rng = np.random.default_rng(0)
    ids = [f"m{i}" for i in range(4)]

    def fill(conn) -> None:
        for mid in ids:
            v = rng.normal(size=8).astype(np.float32)
            insert_memory(conn, mid, f"note {mid}", v / np.linalg.norm(v), model=MODEL_ID, at=AT)
        for s in range(n_sessions):
            add_session(conn, s)

    db.write(fill)
    return db


def add_session(conn, s: int) -> None:
    started = f"2026-02-{s + 2:02d}T09:00:00.000Z"
    insert_scored_session(
        conn,
        f"s{s:02d}",
        None,
        started,
        ["m0", "m1", "m2", "m3"],
        local_time=started[:19],
        ctx=np.ones(8, dtype=np.float32) / np.sqrt(8),
        model=MODEL_ID,
        raw=lambda r: {"baseline_rank": r, "is_embedded": True},
    )


def members(db: Database) -> set[str]:
    return set(db.read(pred_sql.canary_keys))


def test_growing_adds_members_and_keeps_the_ones_it_holds(tmp_path):
    db = _store(tmp_path, 10)
    first = db.write(lambda c: pred_sql.refresh_canary(c, size=2, min_confidence=0.6, at="t1", replace=False))
    assert first == ["s08", "s09"]  # the most recent of equal confidence, oldest session first
    db.write(lambda c: [add_session(c, s) for s in (10, 11)])
    grown = db.write(lambda c: pred_sql.refresh_canary(c, size=3, min_confidence=0.6, at="t2", replace=False))
    assert grown == ["s08", "s09", "s11"]
    # full: growing adds nothing and replaces nothing
    assert db.write(lambda c: pred_sql.refresh_canary(c, size=3, min_confidence=0.6, at="t3", replace=False)) == grown
    assert db.read(pred_sql.canary_newest_start) == "2026-02-13T09:00:00.000Z"


def test_the_weekly_refresh_replaces_the_oldest_members_with_the_sessions_since(tmp_path):
    db = _store(tmp_path, 10)
    db.write(lambda c: pred_sql.refresh_canary(c, size=3, min_confidence=0.6, at="t1", replace=False))
    assert members(db) == {"s07", "s08", "s09"}
    db.write(lambda c: [add_session(c, s) for s in (10, 11)])
    weekly = db.write(lambda c: pred_sql.refresh_canary(c, size=3, min_confidence=0.6, at="t2"))
    # the two sessions since the newest member replace the two oldest members
    assert weekly == ["s09", "s10", "s11"]
    # growing and refreshing at once: the one new session first, then the most recent others
    db.write(lambda c: add_session(c, 12))
    both = db.write(lambda c: pred_sql.refresh_canary(c, size=5, min_confidence=0.6, at="t3"))
    assert both == ["s07", "s08", "s09", "s10", "s11", "s12"][1:] and len(both) == 5
    # a refresh that finds nothing new keeps the set as it is
    assert db.write(lambda c: pred_sql.refresh_canary(c, size=5, min_confidence=0.6, at="t4")) == both
    # a less confident session is not taken, and the empty set is filled from the most recent
    db.write(lambda c: add_session(c, 13))
    db.write(lambda c: c.execute("UPDATE session_scores SET confidence = 0.5 WHERE session_key = 's13'"))
    assert db.write(lambda c: pred_sql.refresh_canary(c, size=5, min_confidence=0.6, at="t5")) == both
    db.write(lambda c: c.execute("DELETE FROM predictor_canary"))
    assert db.write(lambda c: pred_sql.refresh_canary(c, size=2, min_confidence=0.6, at="t6")) == ["s11", "s12"]


def test_the_weekly_refresh_replaces_at_most_max_replaced(tmp_path):
    db = _store(tmp_path, 10)
    db.write(lambda c: pred_sql.refresh_canary(c, size=4, min_confidence=0.6, at="t1", replace=False))
    assert members(db) == {"s06", "s07", "s08", "s09"}
    db.write(lambda c: [add_session(c, s) for s in (10, 11, 12)])
    capped = db.write(lambda c: pred_sql.refresh_canary(c, size=4, min_confidence=0.6, at="t2", max_replaced=2))
    assert capped == ["s08", "s09", "s11", "s12"]  # the two oldest out, the two newest in
    # the cap never keeps the set from filling up to its size
    db.write(lambda c: c.execute("DELETE FROM predictor_canary WHERE session_key = 's08'"))
    assert len(db.write(lambda c: pred_sql.refresh_canary(c, size=4, min_confidence=0.6, at="t3", max_replaced=0))) == 4


def test_a_week_is_counted_between_sessions_not_on_the_wall_clock():
    assert canary_refresh_due(None, None) and canary_refresh_due(None, "2026-02-01T00:00:00.000Z")
    member = "2024-03-01T09:00:00.000Z"
    assert not canary_refresh_due(member, None)
    assert not canary_refresh_due(member, "2024-03-08T08:59:59.000Z")
    assert canary_refresh_due(member, "2024-03-08T09:00:00.000Z")


def test_seen_members_are_swapped_for_sessions_that_started_later(tmp_path):
    db = _store(tmp_path, 10)
    db.write(lambda c: pred_sql.refresh_canary(c, size=4, min_confidence=0.6, at="t1", replace=False))
    assert members(db) == {"s06", "s07", "s08", "s09"}
    through = "2026-02-11T09:00:00.000Z"  # the start of s09: the newest session the model could see
    # nothing started later: nothing to swap in, the set stays
    assert db.write(
        lambda c: pred_sql.swap_canary_members(c, ["s06", "s08"], started_after=through, min_confidence=0.6, at="t2")
    ) == ["s06", "s07", "s08", "s09"]
    db.write(lambda c: add_session(c, 10))
    # one later session for two seen members: the older of them goes; a non-member is ignored
    one = db.write(
        lambda c: pred_sql.swap_canary_members(
            c, ["s08", "s06", "s01"], started_after=through, min_confidence=0.6, at="t3"
        )
    )
    assert one == ["s07", "s08", "s09", "s10"]
    db.write(lambda c: [add_session(c, s) for s in (11, 12)])
    db.write(lambda c: c.execute("UPDATE session_scores SET confidence = 0.5 WHERE session_key = 's12'"))
    # s12 is below the confidence gate; s11 comes in for s08, and s07 (not seen) stays
    assert db.write(
        lambda c: pred_sql.swap_canary_members(c, ["s08"], started_after=through, min_confidence=0.6, at="t4")
    ) == ["s07", "s09", "s10", "s11"]
