"""Feature schema v5: the project-vocabulary flags (:mod:`memlane.predictor.vocabulary`).

Real SQLite stores throughout. The cache moves its cut-off incrementally and follows the
database's changes; every test that moves it compares with a cache built from scratch for the
same cut-off, and the last one checks that the sidecar's score path and training's
``load_sessions`` build the same feature matrix.
"""

from __future__ import annotations

import random
import sqlite3
from datetime import datetime

import numpy as np
import pytest

from memlane.predictor.dataset import derived_signals, load_sessions
from memlane.predictor.features import FEATURE_INDEX
from memlane.predictor.rpc_params import parse_score_params
from memlane.predictor.vocabulary import MIN_DISTINCTIVE_DF, VocabularyCache, tokens
from memlane.storage import memories as mem_sql
from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql
from memlane.storage.db import Database, open_readonly
from memlane.storage.migrations import migrate
from predictor_store_helpers import insert_memory, insert_scored_session

DIM = 8
MODEL_ID = "test-8"
LEDGER, ACME = "/src/ledger", "/src/acme-api"
DAY = "2026-02-0{}T09:00:00.000Z"

# (id, content, stored project, created day)
NOTES = [
    ("l1", "ledger: deploys go through Argo CD to the EKS cluster.", None, 1),
    ("l2", "Rollback with argocd app rollback; the EKS nodes drain first.", LEDGER, 1),
    ("a1", "acme-api: deploys go out via make release to fly.io.", None, 1),
    ("a2", "acme-api rolls back with fly releases rollback on fly.io.", None, 1),
    ("u-ledger", "The deploy waits for Argo CD to report healthy on EKS.", None, 2),
    ("u-acme", "After a release to fly.io the first requests are slow.", None, 2),
    ("u-both", "Moving from fly.io to EKS is not planned this year.", None, 2),
    ("u-none", "Deploys wait for the health check before announcing.", None, 2),
    ("late-acme", "acme-api keeps its fly.io config in fly.toml next to the Dockerfile.", None, 5),
]


def _memory(conn: sqlite3.Connection, mid: str, content: str, project: str | None, at: str, vec: np.ndarray) -> None:
    insert_memory(conn, mid, content, vec, model=MODEL_ID, at=at, project=project)


def _session(
    conn: sqlite3.Connection, key: str, project: str, started_at: str, ids: list[str], ctx: np.ndarray
) -> None:
    insert_scored_session(
        conn,
        key,
        project,
        started_at,
        ids,
        local_time=started_at.replace(".000Z", "+00:00"),
        ctx=ctx,
        model=MODEL_ID,
        raw=_raw,
    )


def _raw(i: int) -> dict:
    return {
        "age_days": 1.0 + i,
        "importance": 0.5,
        "access_count": 0,
        "is_embedded": True,
        "baseline_score": 1.0 / (i + 1),
        "baseline_rank": i,
        "context_similarity": 0.1 * i,
    }


@pytest.fixture()
def store(tmp_path):
    """The notes above; a ledger session on day 1 (09:00) and an acme-api one on day 3, 4 and 6."""
    rng = np.random.default_rng(3)
    path = tmp_path / "memlane.db"
    db = Database(path)
    migrate(db)
    ids = [n[0] for n in NOTES]
    ctx = rng.normal(size=DIM).astype(np.float32)

    def fill(conn: sqlite3.Connection) -> None:
        for mid, text, project, day in NOTES:
            _memory(
                conn,
                mid,
                text,
                project,
                DAY.format(day).replace("09:00", "08:00"),
                rng.normal(size=DIM).astype(np.float32),
            )
        _session(conn, "ledger-1", LEDGER, DAY.format(1), ids[:8], ctx)
        for d in (3, 4, 6):
            _session(conn, f"acme-{d}", ACME, DAY.format(d), ids if d == 6 else ids[:8], ctx)

    db.write(fill)
    yield path, db, ids, ctx
    db.close()


def _flags(conn, ids, project, day):
    when = datetime.fromisoformat(DAY.format(day).replace("Z", "+00:00"))
    d = derived_signals(conn, ids, project=project, session_time=when)
    return {m: (d[m]["shares_project_vocabulary"], d[m]["shares_other_project_vocabulary"]) for m in ids}


def test_tokens_are_lower_case_words_with_dots_and_dashes_without_function_words():
    assert tokens("Deploy to Fly.io via `make release`; see fly.toml, A1 and the x") == {
        "deploy",
        "fly.io",
        "via",
        "make",
        "release",
        "see",
        "fly.toml",
        "a1",
    }


def test_a_note_naming_no_project_shares_the_vocabulary_of_the_one_whose_words_it_uses(store):
    path, _, ids, _ = store
    conn = open_readonly(path)
    got = _flags(conn, ids, ACME, 4)  # ledger and acme-api both started before day 4
    # "fly.io" is in two acme-api notes, "eks" / "argo" in two ledger notes (one stored under ledger)
    assert got["u-acme"] == (True, False)
    assert got["u-ledger"] == (False, True)
    assert got["u-both"] == (True, True)
    assert got["u-none"] == (False, False)  # only words every project uses
    # notes stored under a project or naming one: the mention flags already say which
    assert got["l1"] == got["l2"] == got["a1"] == got["a2"] == (False, False)
    # from ledger's side the same notes swap
    assert _flags(conn, ids, LEDGER, 4)["u-acme"] == (False, True)
    assert _flags(conn, ids, LEDGER, 4)["u-ledger"] == (True, False)
    # without a project, nothing
    assert not any(a or b for a, b in _flags(conn, ids, None, 4).values())


def test_only_memories_written_and_projects_started_before_the_session_count(store):
    path, _, ids, _ = store
    conn = open_readonly(path)
    # day 1, 09:00: acme-api has had no session, so "acme-api: ..." names no known project and
    # teaches nothing; the ledger session sees ledger's own words only
    day1 = _flags(conn, ids, LEDGER, 1)
    assert day1["u-ledger"] == (True, False) and day1["u-acme"] == (False, False)
    # the day-2 notes do not exist yet on day 1, but their flags are asked for all the same:
    # they are judged by the vocabulary of the notes written before
    assert MIN_DISTINCTIVE_DF == 2


def test_a_token_needs_two_notes_of_one_project_and_none_of_another(tmp_path):
    db = Database(tmp_path / "m.db")
    migrate(db)
    rng = np.random.default_rng(0)
    notes = [
        ("p1", "alpha: uses zookeeper for locks.", None),
        ("p2", "alpha: zookeeper runs on three nodes.", None),
        ("q1", "beta: zookeeper is being removed.", None),
        ("q2", "beta: redis holds the locks.", None),
        ("q3", "beta: redis is on version 7.", None),
        ("u1", "Check zookeeper before redis when locks hang.", None),
        ("u2", "Redis needs a restart.", None),
    ]
    db.write(
        lambda c: [
            _memory(c, m, t, p, DAY.format(1).replace("09", "07"), rng.normal(size=DIM).astype(np.float32))
            for m, t, p in notes
        ]
    )
    for key, proj in (("s-a", "/x/alpha"), ("s-b", "/x/beta")):
        db.write(
            lambda c, key=key, proj=proj: sess_sql.insert_session(
                c,
                key=key,
                project=proj,
                harness="t",
                cwd=None,
                context="c",
                started_at=DAY.format(1).replace("09", "08"),
                predictor_state="collecting",
            )
        )
    conn = open_readonly(tmp_path / "m.db")
    when = datetime.fromisoformat(DAY.format(2).replace("Z", "+00:00"))
    d = derived_signals(conn, ["u1", "u2"], project="/x/alpha", session_time=when)
    # zookeeper: two alpha notes but also a beta one -> nobody's; redis: two beta notes -> beta's
    assert (d["u1"]["shares_project_vocabulary"], d["u1"]["shares_other_project_vocabulary"]) == (False, True)
    assert (d["u2"]["shares_project_vocabulary"], d["u2"]["shares_other_project_vocabulary"]) == (False, True)
    db.close()


def _fresh(conn, ids, project, cutoff, known):
    c = VocabularyCache()
    c.sync(conn)
    return c.signals(ids, project=project, cutoff=cutoff, known_projects=known)


def test_moving_the_cut_off_back_and_forth_equals_a_fresh_cache(store):
    path, _, ids, _ = store
    conn = open_readonly(path)
    cache = VocabularyCache()
    cache.sync(conn)
    rnd = random.Random(7)
    cut_offs = [f"2026-02-0{d}T{h:02d}:00:00.000Z" for d in range(1, 7) for h in (7, 8, 9, 12)]
    for _ in range(60):
        cutoff = rnd.choice(cut_offs)
        known = rnd.choice([[], [LEDGER], [LEDGER, ACME], [ACME]])
        project = rnd.choice([LEDGER, ACME, "/src/orbit-web"])
        assert cache.signals(ids, project=project, cutoff=cutoff, known_projects=known) == _fresh(
            conn, ids, project, cutoff, known
        ), (cutoff, known, project)


def test_sync_follows_new_edited_deleted_and_removed_memories(store):
    path, db, ids, _ = store
    conn = open_readonly(path)
    cache = VocabularyCache()
    cache.sync(conn)
    cutoff, known = DAY.format(9), [LEDGER, ACME]

    def same() -> dict:
        cache.sync(conn)
        got = cache.signals(ids + ["new"], project=ACME, cutoff=cutoff, known_projects=known)
        assert got == _fresh(conn, ids + ["new"], ACME, cutoff, known)
        return got

    assert same()["u-acme"] == (True, False)
    # a new note naming no project, written after the first sync
    db.write(lambda c: _memory(c, "new", "Staging runs on fly.io too.", None, DAY.format(7), np.ones(DIM, np.float32)))
    assert same()["new"] == (True, False)
    # an acme-api note is deleted: "fly.io" still has a1 and late-acme
    db.write(lambda c: mem_sql.set_deleted(c, "a2", True, DAY.format(8)))
    assert same()["u-acme"] == (True, False)
    # ... and a1 is edited to name no project: fly.io has only late-acme -> not distinctive
    db.write(lambda c: mem_sql.update_fields(c, "a1", {"content": "Deploys go out via make release."}, DAY.format(8)))
    assert same()["u-acme"] == (False, False)
    # a row removed outright (not soft-deleted) is noticed too
    db.write(
        lambda c: c.execute(
            "DELETE FROM embeddings WHERE content_hash = (SELECT content_hash FROM memories WHERE id = 'late-acme')"
        )
    )
    db.write(lambda c: c.execute("DELETE FROM memories WHERE id = 'late-acme'"))
    assert same()["late-acme"] == (False, False)
    conn.close()


def test_scoring_and_training_build_the_same_v5_matrix(store):
    path, _, ids, ctx = store
    conn = open_readonly(path)
    stored = {
        s.session_id: s for s in load_sessions(conn, embedding_model=MODEL_ID, native_dim=DIM, min_confidence=0.6)
    }
    assert set(stored) == {"ledger-1", "acme-3", "acme-4", "acme-6"}
    mine, other = FEATURE_INDEX["shares_project_vocabulary"], FEATURE_INDEX["shares_other_project_vocabulary"]

    def derive(m, project, when):
        cache.sync(conn)  # as the sidecar does before each score request
        return derived_signals(conn, m, project=project, session_time=when, vocabulary=cache)

    lookup = lambda m: {k: (c, b) for k, (c, b, _) in pred_sql.memory_rows(conn, m, MODEL_ID).items()}  # noqa: E731
    cache = VocabularyCache()  # one cache across requests, as the sidecar keeps it
    for key in ("acme-6", "ledger-1", "acme-3", "acme-4"):
        project = LEDGER if key.startswith("ledger") else ACME
        n = stored[key].features.shape[0]
        params = {
            "candidate_ids": ids[:n],
            "candidates": [_raw(i) for i in range(n)],
            "session_time": DAY.format(int(key[-1])).replace(".000Z", "+00:00"),
            "session_gap_hours": 2.0,
            "project": project,
            "context_embedding": np.asarray(ctx, dtype=np.float32).tolist(),
        }
        _, served = parse_score_params(params, native_dim=DIM, lookup=lookup, derive=derive)
        np.testing.assert_array_equal(served.features, stored[key].features)
    # the acme-api session of day 4 sees u-acme as its own and u-ledger as ledger's
    f = stored["acme-4"].features
    assert f[ids.index("u-acme"), mine] == 1 and f[ids.index("u-ledger"), other] == 1
    assert f[:, mine].sum() == 2 and f[:, other].sum() == 2  # u-acme, u-both / u-ledger, u-both
    conn.close()


def test_the_sidecar_loads_the_vocabulary_once_and_follows_appends(store):
    path, db, ids, _ = store
    conn = open_readonly(path)
    cache = VocabularyCache()
    cache.sync(conn)
    first = len(cache._mem)
    db.write(lambda c: _memory(c, "x", "One more note about EKS.", None, DAY.format(8), np.ones(DIM, np.float32)))
    cache.sync(conn)
    assert len(cache._mem) == first + 1 == len(ids) + 1
    conn.close()
