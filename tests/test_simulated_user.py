"""The simulated developer of ``memlane bench predictor --dataset simulated``."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks import simulated_user as su
from benchmarks.simulated_user import NEW_MAIN, OLD_MAIN, SIDE, TOPICS, VAGUE_SHARE_RANGE, generate
from memlane.normalize import content_hash

SEEDS = range(6)


@pytest.fixture(scope="module")
def users():
    return {seed: generate(seed) for seed in SEEDS}


def _digest(u) -> str:
    return hashlib.sha256(repr((u.memories, u.sessions)).encode()).hexdigest()


def test_deterministic_in_seed(users):
    assert generate(0) == users[0] and _digest(generate(0)) == _digest(users[0])
    assert generate(1) != users[0]


def test_deterministic_across_processes_and_hash_seeds(users):
    code = (
        "import hashlib; from benchmarks.simulated_user import generate; u = generate(3); "
        "print(hashlib.sha256(repr((u.memories, u.sessions)).encode()).hexdigest())"
    )
    out = [
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": h},
            cwd=Path(__file__).resolve().parents[1],
        ).stdout.strip()  # benchmarks/ on the path
        for h in ("1", "4242")
    ]
    assert out[0] == out[1] == _digest(users[3])


@pytest.mark.parametrize("seed", SEEDS)
def test_shape(users, seed):
    u = users[seed]
    assert len(u.sessions) == 200 and [s.index for s in u.sessions] == list(range(200))
    times = [s.local_time for s in u.sessions]
    assert times == sorted(times) and len(set(times)) == 200
    assert all(6 <= t.hour <= 23 for t in times)
    assert 400 <= len(u.memories) <= 600
    assert 140 <= sum(m.created_session == 0 for m in u.memories) <= 180
    assert [m.created_session for m in u.memories] == sorted(m.created_session for m in u.memories)
    assert len({m.key for m in u.memories}) == len(u.memories)
    for m in u.memories:
        assert m.type in {"fact", "decision", "preference", "procedural"}
        assert 0.3 <= m.importance <= 0.9
        assert m.project in (None, m.about) or (m.kind == "preference" and m.about is None)
        assert u.memory(m.key) is m
    assert sum(m.project is None for m in u.memories) / len(u.memories) > 0.6  # mostly a global store
    for s in u.sessions:
        assert 2 <= len(s.relevant) <= 6 and set(s.relevant.values()) <= {1.0, 0.5}
        assert s.context.strip() and s.topic in TOPICS
        assert u.relevant_at(s.index) == s.relevant


@pytest.mark.parametrize("seed", SEEDS)
def test_relevant_memories_exist_are_current_and_in_the_pool(users, seed):
    u = users[seed]
    for s in u.sessions:
        for key in s.relevant:
            m = u.memory(key)
            assert m.created_session <= s.index
            assert m.stale_from is None or s.index < m.stale_from
            assert m.superseded_at is None or s.index < m.superseded_at
            assert m.project in (None, s.project)  # the daemon's pool: global + the session project's
            assert m.about in (None, s.project)
        assert sum(u.memory(k).about == s.project and u.memory(k).topic == s.topic for k in s.relevant) >= 1


@pytest.mark.parametrize("seed", SEEDS)
def test_staleness_and_supersession(users, seed):
    u = users[seed]
    events = [(s.index, new, old) for s in u.sessions for new, old in s.supersede_events]
    assert len(events) >= 12
    for index, new, old in events:
        n, o = u.memory(new), u.memory(old)
        assert n.supersedes == old and n.created_session == index and o.superseded_at == index
        assert 2 <= index - o.stale_from <= 6  # wrong for a few sessions before it is replaced
        assert (n.about, n.topic, n.type) == (o.about, o.topic, o.type)
    for m in u.memories:
        if m.supersedes is not None:
            assert any(e[1] == m.key for e in events)
    # the replacement is what gets used afterwards
    used = sum(any(k == new for s in u.sessions[i:] for k in s.relevant) for i, new, _ in events)
    assert used >= len(events) // 2


@pytest.mark.parametrize("seed", SEEDS)
def test_project_change_at_change_at(users, seed):
    u = users[seed]
    before, after = u.sessions[: u.change_at], u.sessions[u.change_at :]
    assert all(s.project != NEW_MAIN for s in before)
    assert all(m.created_session >= u.change_at - 3 for m in u.memories if m.about == NEW_MAIN)
    cb, ca = Counter(s.project for s in before), Counter(s.project for s in after)
    assert cb.most_common(1)[0][0] == OLD_MAIN and ca.most_common(1)[0][0] == NEW_MAIN
    assert ca[OLD_MAIN] <= 0.1 * len(after) < 0.25 * cb[OLD_MAIN]  # the old main project mostly stops
    assert NEW_MAIN in {s.project for s in u.sessions[u.change_at : u.change_at + 10]}


def test_change_at_is_a_parameter():
    u = generate(2, sessions=120, change_at=40)
    assert len(u.sessions) == 120 and all(s.project != NEW_MAIN for s in u.sessions[:40])
    assert Counter(s.project for s in u.sessions[40:]).most_common(1)[0][0] == NEW_MAIN
    with pytest.raises(ValueError):
        generate(0, sessions=10, change_at=10)


def test_vague_share_in_documented_range():
    for seed in range(12):
        u = generate(seed)
        assert VAGUE_SHARE_RANGE[0] <= u.stats()["vague_share"] <= VAGUE_SHARE_RANGE[1], seed
        for s in u.sessions:
            if s.vague:  # names the topic, not the project nor any of its tools
                assert not any(p in s.context for p in su.PROJECTS)
                assert not any(v in s.context for v in su.PROJECTS[s.project].values() if len(v) > 3)


@pytest.mark.parametrize("seed", SEEDS)
def test_time_of_day_habits_hold(users, seed):
    u = users[seed]
    main = [OLD_MAIN if s.index < u.change_at else NEW_MAIN for s in u.sessions]
    morning = [s for s in u.sessions if s.slot == "morning"]
    off_hours = [s for s in u.sessions if s.slot in ("evening", "weekend")]
    assert len(morning) >= 50 and len(off_hours) >= 25
    assert sum(s.project == main[s.index] for s in morning) / len(morning) > 0.55
    assert sum(s.project == SIDE for s in morning) / len(morning) < 0.15
    assert sum(s.project == SIDE for s in off_hours) / len(off_hours) > 0.55
    ops = {"deploy", "ci", "logging", "migrations"}
    afternoon = [s for s in u.sessions if s.slot == "afternoon"]
    assert sum(s.topic in ops for s in morning) / len(morning) > sum(s.topic in ops for s in afternoon) / len(afternoon)


@pytest.mark.parametrize("seed", SEEDS)
def test_contents_unique_and_sized(users, seed):
    u = users[seed]
    assert len({content_hash(m.content) for m in u.memories}) == len(u.memories)
    assert all(60 <= len(m.content) <= 300 for m in u.memories)
    assert not any("<" in m.content and ">" in m.content and "<package>" not in m.content for m in u.memories)
    assert not any("[" in m.content and "|" in m.content for m in u.memories)


@pytest.mark.parametrize("seed", SEEDS)
def test_shared_topics_and_preferences(users, seed):
    u = users[seed]
    for p in su.PROJECTS:  # every project has notes on every topic (near-duplicates across projects)
        assert {m.topic for m in u.memories if m.about == p} >= set(TOPICS)
    core = [m.key for m in u.memories if m.kind == "preference"][:4]
    share = sum(any(k in s.relevant for k in core) for s in u.sessions) / len(u.sessions)
    assert 0.35 <= share <= 0.7


def test_stats_and_describe(users):
    u = users[0]
    st = u.stats()
    assert st["sessions"] == 200 and st["memories"] == len(u.memories)
    assert sum(st["sessions_before_change"].values()) == u.change_at
    assert sum(st["memories_by_type"].values()) == len(u.memories)
    assert 2 <= st["mean_relevant"] <= 6 and st["supersessions"] >= 12
    assert "200 sessions" in u.describe() and "orbit-web" in u.describe()
    assert len(u.memories_at(0)) == st["initial_memories"]
