"""PredictorService without a sidecar: the candidate signals it logs and sends (real SQLite)."""

from __future__ import annotations

from memlane.config.predictor import PredictorSettings
from memlane.services.inputs import RememberInput
from memlane.services.predictor_service import PredictorService
from memlane.services.predictor_types import PoolMember
from memlane.storage import predictor as pred_sql

PROJECT = "/home/me/src/acme-api"


def test_mentions_project_reads_only_the_texts_of_other_projects(open_store) -> None:
    c = open_store()
    texts = {
        "own": ("Deploys go through the staging cluster first.", PROJECT),
        "global-named": ("The ACME-API service pages on-call when p99 is high.", None),
        "global-other": ("Lunch is at noon on Fridays.", None),
        "other-named": ("acme-api shares its database with billing.", "/home/me/src/billing"),
        "other-plain": ("Billing retries failed charges three times.", "/home/me/src/billing"),
    }
    ids = {k: c.memories.remember(RememberInput(content=t, project=p)).id for k, (t, p) in texts.items()}
    seq = dict(c.db.read(lambda conn: conn.execute("SELECT id, seq FROM memories").fetchall()))
    pool = [PoolMember(ids[k], seq[ids[k]], 0.5, i + 1, None) for i, k in enumerate(texts)]
    svc = PredictorService(c.db, c.memories.index, None, PredictorSettings())
    got = {k: svc.candidate_signals(pool, 0.0, PROJECT)[ids[k]]["mentions_project"] for k in texts}
    assert got == {"own": True, "global-named": True, "global-other": False, "other-named": True, "other-plain": False}
    assert not any(f["mentions_project"] for f in svc.candidate_signals(pool, 0.0, None).values())
    # the memories of the session's project are not read (their text cannot change the signal)
    rows = c.db.read(lambda conn: pred_sql.contents_and_projects(conn, list(ids.values()), unread_project=PROJECT))
    assert rows[ids["own"]] == ("", PROJECT) and rows[ids["other-plain"]] == texts["other-plain"]
