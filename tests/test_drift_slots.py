"""Slot changes as drift evidence (docs/drift.md "Slot changes"): the numbers, versions, dates and
code identifiers of a statement, and a memory flagged when its own sentence in the document it
references changed one of them, on real SQLite with the real local embedding model."""

from __future__ import annotations

import pytest

from memlane.drift.slots import slots
from memlane.services.inputs import RecallQuery, RememberInput

CLAIM = "A 1.0 release is expected to be issued sometime around mid-2020."
PAGE_V1 = f"Release planning. {CLAIM} The API is considered stable. Pin your dependencies."
PAGE_V2 = (
    "Release planning. A 1.0 release is expected to be issued sometime in 2021. The API is considered "
    "stable. Pin your dependencies."
)


def test_slots_are_numbers_versions_dates_and_code_identifiers():
    assert slots(CLAIM) == {"1.0", "2020"}
    assert slots("Besides, `httpx.Request()` does not support `allow_redirects` or `timeout`.") == {
        "httpx.Request",
        "allow_redirects",
    }
    assert slots("Call close() and set followRedirects on **PoolLimits**: 5 seconds, 2020-05-01, v0.18.0.") == {
        "close",
        "followRedirects",
        "PoolLimits",
        "5",
        "2020-05-01",
        "0.18.0",
    }
    assert slots("Plain prose with no tokens of that kind.") == frozenset()


def _ingest(c, content: str, title: str) -> str:
    doc = c.documents.create(content=content, title=title)
    w = c.workers.get("documents")
    while w.run_once():
        pass
    return doc.id


def _write_then_change(c) -> str:
    v1 = _ingest(c, PAGE_V1, "roadmap")
    mid = c.memories.remember(RememberInput(content=f"{CLAIM} See [[roadmap]].")).id
    c.drift.drain()
    held = c.db.read(
        lambda conn: conn.execute(
            "SELECT baseline_slots FROM memory_references WHERE memory_id = ? AND kind = 'document'", (mid,)
        ).fetchone()[0]
    )
    assert held == '["1.0", "2020"]'  # its own sentence held both when it was written
    c.documents.delete(v1)
    _ingest(c, PAGE_V2, "roadmap")
    c.recall.recall(RecallQuery(query="1.0 release expected", limit=10, touch=False, types=("fact",)))
    c.drift.drain()
    return mid


def test_a_changed_date_in_its_own_sentence_flags_the_memory_and_says_what_changed(open_store):
    c = open_store(embedding="local", drift={"recheck_seconds": 0})
    mid = _write_then_change(c)
    (row,) = c.drift.list(error_type="memory_drift")
    assert row["memory_id"] == mid
    assert row["context"]["slots"] == {"was": ["2020"], "now": ["2021"]}
    hit = next(
        h
        for h in c.recall.recall(RecallQuery(query="1.0 release expected", limit=10, touch=False)).hits
        if h.memory.id == mid
    )
    assert hit.memory.content.startswith("[DRIFT: drifted from document 'roadmap' (similarity ")
    assert "; 2020 -> 2021)]" in hit.memory.content


def test_slot_changes_off(open_store):
    c = open_store(embedding="local", drift={"recheck_seconds": 0, "slot_similarity": 1.01})
    v1 = _ingest(c, PAGE_V1, "roadmap")
    mid = c.memories.remember(RememberInput(content=f"{CLAIM} See [[roadmap]].")).id
    c.drift.drain()
    c.documents.delete(v1)
    _ingest(c, PAGE_V2, "roadmap")
    c.recall.recall(RecallQuery(query="1.0 release expected", limit=10, touch=False, types=("fact",)))
    c.drift.drain()
    rows = c.drift.list(error_type="memory_drift", memory_id=mid)
    assert all("slots" not in r["context"] for r in rows)
    assert all(r["cosine_distance"] > c.settings.drift.threshold for r in rows)  # only a drop can flag it


@pytest.mark.parametrize("unchanged", [PAGE_V1, PAGE_V1 + " Version 0.18 adds HTTP/2."])
def test_no_slot_change_when_its_sentence_kept_its_slots(open_store, unchanged):
    c = open_store(embedding="local", drift={"recheck_seconds": 0})
    v1 = _ingest(c, PAGE_V1, "roadmap")
    mid = c.memories.remember(RememberInput(content=f"{CLAIM} See [[roadmap]].")).id
    c.drift.drain()
    c.documents.delete(v1)
    _ingest(c, unchanged, "roadmap")  # new slots elsewhere in the page are not its sentence's
    c.recall.recall(RecallQuery(query="1.0 release expected", limit=10, touch=False, types=("fact",)))
    c.drift.drain()
    assert c.drift.list(error_type="memory_drift", memory_id=mid) == []
