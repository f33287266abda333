"""Drift detection at retrieval (issue 41; memory-drift-detection.md "Verification"), on real
SQLite with the real local embedding model: the baseline a reference takes when the memory is
written, no row while a memory matches the document it references, a ``memory_drift`` row after
the document changes, none for a memory that never was close to its document, debounce, the
consumer listing, resolution on update, removal on forget, and the retrieval rules (penalty and
warning in recall, never injected at session-start or prompt-submit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlane.services.inputs import RecallQuery, RememberInput
from memlane.sessions.inputs import PromptInput, StartInput

BLOCKER = "The login blocker is still open: the auth database must be migrated to Postgres before the release can ship."
NOTE_V1 = (
    "Project Alpha status. The login blocker is still open: the auth database must be migrated "
    "to Postgres before the release can ship. Owners: infra team."
)
NOTE_V2 = (
    "Project Alpha status. Release 2.0 shipped in March. The onboarding tutorial now has new "
    "screenshots and the marketing site was redesigned with a dark theme."
)


@pytest.fixture
def vstore(open_store):
    """A store with the real embedding model that re-checks a memory at every retrieval."""
    return open_store(embedding="local", drift={"recheck_seconds": 0})


def _ingest(c, content: str, title: str) -> str:
    doc = c.documents.create(content=content, title=title)
    w = c.workers.get("documents")
    while w.run_once():
        pass
    assert c.documents.get(doc.id).status == "done"
    return doc.id


def _swap(c, old: str, content: str, title: str = "alpha-status") -> str:
    """A new version of the note: the old document deleted, the new text ingested under its title."""
    c.documents.delete(old)
    return _ingest(c, content, title)


def _baseline(c, mid: str) -> tuple:
    """(similarity, document id, model) of the memory's document reference's baseline."""
    return tuple(
        c.db.read(
            lambda conn: conn.execute(
                "SELECT baseline_similarity, baseline_document, baseline_model FROM memory_references "
                "WHERE memory_id = ? AND kind = 'document'",
                (mid,),
            ).fetchone()
        )
    )


def _recall(c, query: str = "login blocker auth database"):
    hits = c.recall.recall(RecallQuery(query=query, limit=10, touch=False, types=("fact",))).hits
    c.drift.drain()
    return hits


def _rows(c, **kw):
    kw.setdefault("resolved", None)
    return c.drift.list(**kw)


def test_no_row_while_close_a_row_after_the_note_changes_then_debounce(vstore):
    c = vstore
    v1 = _ingest(c, NOTE_V1, "alpha-status")
    mid = c.memories.remember(RememberInput(content=f"{BLOCKER} See [[alpha-status]].")).id
    assert [r.kind for r in c.drift.references_of(mid)] == ["document"]
    c.drift.drain()  # the write queued the check that takes the reference's baseline
    sim, doc, model = _baseline(c, mid)
    assert doc == v1 and sim > 0.9 and model == c.drift.model_id()
    _recall(c)
    assert _rows(c) == []  # the memory says what the note says: no drift

    new = _swap(c, v1, NOTE_V2)  # the note now says the release shipped
    hits = _recall(c)
    rows = _rows(c, error_type="memory_drift")
    assert len(rows) == 1
    row = rows[0]
    assert row["memory_id"] == mid and row["target"] == new and row["resolved_at"] is None
    assert row["cosine_distance"] > c.settings.drift.threshold
    assert row["cosine_distance"] == pytest.approx(sim - row["context"]["max_sim"], abs=1e-6)
    assert row["context"]["baseline_similarity"] == pytest.approx(sim) and row["context"]["baseline_document"] == v1
    assert row["context"]["title"] == "alpha-status" and row["query"] == f"memory:{mid}"
    assert row["memory"]["content"].startswith(BLOCKER)  # the consumer gets the memory attached
    assert hits[0].memory.content == f"{BLOCKER} See [[alpha-status]]."  # that answer was not delayed

    # retrieved again within the debounce window: the same row, not a second one
    hits = _recall(c)
    assert len(_rows(c)) == 1
    # and now recall returns it with the warning prefix and the penalty
    hit = next(h for h in hits if h.memory.id == mid)
    assert hit.memory.content.startswith(
        f"[DRIFT: drifted from document 'alpha-status' (similarity {sim:.2f} -> {row['context']['max_sim']:.2f})]"
    )
    assert hit.memory.confidence == 0.5 * c.memories.get(mid).confidence


def test_debounce_keeps_the_strongest_signal(vstore):
    c = vstore
    doc = _ingest(c, NOTE_V2, "alpha-status")
    mid = c.memories.remember(RememberInput(content=f"{BLOCKER} See [[alpha-status]].")).id
    from memlane.storage import drift as drift_sql

    def write(d):
        return c.db.write(
            lambda conn: drift_sql.record(
                conn,
                memory_id=mid,
                error_type="memory_drift",
                target=doc,
                distance=d,
                context={"d": d},
                at="2026-01-01T10:00:00.000Z",
                debounce_since="2026-01-01T00:00:00.000Z",
            )
        )

    first, created = write(0.7)
    assert created
    assert write(0.9) == (first, False)
    assert write(0.8) == (first, False)
    row = _rows(c)[0]
    assert row["cosine_distance"] == 0.9 and row["context"] == {"d": 0.9}
    # outside the window: a new row
    c.db.write(lambda conn: conn.execute("UPDATE prediction_errors SET detected_at = '2025-12-30T00:00:00.000Z'"))
    assert write(0.75)[1] is True
    assert len(_rows(c)) == 2


def test_update_resolves_and_forget_removes(vstore):
    c = vstore
    v1 = _ingest(c, NOTE_V1, "alpha-status")
    mid = c.memories.remember(RememberInput(content=f"{BLOCKER} See [[alpha-status]].")).id
    other = c.memories.remember(RememberInput(content=f"{BLOCKER} Details in [[alpha-status]]. v2")).id
    c.drift.drain()
    v2 = _swap(c, v1, NOTE_V2)
    _recall(c)
    assert len(_rows(c, resolved=False, memory_id=mid)) == 1
    assert c.drift.flags_of(mid)
    c.memories.update(mid, {"content": "Release 2.0 shipped in March; see [[alpha-status]]."})
    assert _rows(c, resolved=False, memory_id=mid) == [] and len(_rows(c, resolved=True)) == 1
    assert c.drift.flags_of(mid) == ()
    c.drift.drain()  # the update re-extracted the reference: its baseline is taken against the note now
    assert _baseline(c, mid)[1] == v2
    hits = _recall(c, "release shipped march")
    assert all(not h.memory.content.startswith("[") for h in hits if h.memory.id == mid)
    assert _rows(c, resolved=False, memory_id=mid) == []  # the updated memory matches the note: no new row

    assert _rows(c, memory_id=other)
    c.memories.delete(other)
    assert _rows(c, memory_id=other) == []
    assert c.drift.flags_of(other) == ()


def test_no_references_or_no_document_means_no_row(vstore):
    c = vstore
    c.memories.remember(RememberInput(content=BLOCKER))  # no reference at all
    c.memories.remember(RememberInput(content=f"{BLOCKER} See [[no-such-note]]."))  # unresolvable
    _recall(c)
    assert _rows(c) == []


def test_a_reference_to_a_note_ingested_later_takes_its_baseline_at_the_ingest(vstore):
    c = vstore
    mid = c.memories.remember(RememberInput(content=f"{BLOCKER} See [[alpha-status]].")).id
    c.drift.drain()
    assert _baseline(c, mid)[0] is None  # no document yet: nothing to measure against
    v1 = _ingest(c, NOTE_V1, "alpha-status")
    c.drift.drain()
    assert _baseline(c, mid)[1] == v1  # taken when the note was ingested, before any retrieval
    _recall(c)
    assert _rows(c) == []
    _swap(c, v1, NOTE_V2)
    _recall(c)
    assert [r["memory_id"] for r in _rows(c)] == [mid]


def test_a_memory_that_never_matched_its_note_has_not_drifted(vstore):
    """Drift is movement: a claim the note never made (far from it when written) is not flagged,
    however far it is, until the note moves away from where it stood."""
    c = vstore
    v2 = _ingest(c, NOTE_V2, "alpha-status")
    mid = c.memories.remember(RememberInput(content=f"{BLOCKER} See [[alpha-status]].")).id
    c.drift.drain()
    sim, doc, _ = _baseline(c, mid)
    assert doc == v2 and 1.0 - sim > c.settings.drift.threshold  # far from the note from the start
    _recall(c)
    assert _rows(c) == []


def test_a_baseline_of_another_model_is_measured_again(vstore):
    c = vstore
    v1 = _ingest(c, NOTE_V1, "alpha-status")
    mid = c.memories.remember(RememberInput(content=f"{BLOCKER} See [[alpha-status]].")).id
    c.drift.drain()
    sim = _baseline(c, mid)[0]
    c.db.write(
        lambda conn: conn.execute(
            "UPDATE memory_references SET baseline_similarity = 1.0, baseline_model = 'other-model' "
            "WHERE memory_id = ?",
            (mid,),
        )
    )
    _recall(c)
    assert _rows(c) == []  # not a drop of 1.0 - sim: that baseline is not comparable
    assert _baseline(c, mid) == (pytest.approx(sim, abs=1e-6), v1, c.drift.model_id())


def test_drifting_memory_is_never_injected_proactively(vstore):
    c = vstore
    v1 = _ingest(c, NOTE_V1, "alpha-status")
    bad = c.memories.remember(RememberInput(content=f"{BLOCKER} See [[alpha-status]].", importance=0.9)).id
    good = c.memories.remember(RememberInput(content="The login page uses the auth database.", importance=0.9)).id
    c.drift.drain()
    _swap(c, v1, NOTE_V2)
    start = c.sessions.start(StartInput("s-before", context="login blocker auth database"))
    assert bad in {x["id"] for x in start.injected}  # not known to drift yet
    c.drift.drain()  # the start queued a check of what it showed
    assert c.drift.flags_of(bad)
    start = c.sessions.start(StartInput("s-after", context="login blocker auth database"))
    ids = {x["id"] for x in start.injected}
    assert bad not in ids and good in ids
    res = c.sessions.prompt(PromptInput("s-prompt", prompt="is the login blocker on the auth database open?"))
    assert bad in res.matched and bad not in res.injected
    assert BLOCKER not in res.inject
    # recall still returns it, flagged
    hit = next(h for h in _recall(c) if h.memory.id == bad)
    assert hit.memory.content.startswith("[DRIFT:")


def test_missing_file_at_retrieval_marks_it_stale(vstore, tmp_path: Path):
    c = vstore
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "billing.py").write_text("x = 1\n")
    mid = c.memories.remember(
        RememberInput(content="Invoice rounding lives in src/billing.py (banker's rounding).", project=str(root))
    ).id
    refs = c.drift.references_of(mid)
    assert [(r.kind, r.target) for r in refs] == [("file", "src/billing.py")]
    q = RecallQuery(query="invoice rounding", project=str(root), touch=False)
    c.recall.recall(q)
    c.drift.drain()
    assert _rows(c) == []
    (root / "src" / "billing.py").unlink()
    c.recall.recall(q)
    c.drift.drain()
    rows = _rows(c, error_type="memory_stale_file")
    assert [(r["memory_id"], r["target"]) for r in rows] == [(mid, "src/billing.py")]
    hit = c.recall.recall(q).hits[0]
    assert hit.memory.content.startswith("[STALE: file src/billing.py is missing]")
    stale = c.db.read(
        lambda conn: conn.execute(
            "SELECT stale_at FROM memory_references WHERE memory_id = ? AND kind = 'file'", (mid,)
        ).fetchone()[0]
    )
    assert stale is not None
    start = c.sessions.start(StartInput("s-file", project=str(root), context="invoice rounding billing"))
    assert mid not in {x["id"] for x in start.injected}


def test_words_that_look_like_paths_are_not_file_references(vstore, tmp_path: Path):
    c = vstore
    root = tmp_path / "p2"
    root.mkdir()
    mid = c.memories.remember(
        RememberInput(content="Use e.g. config.yaml or ../../etc/passwd here.", project=str(root))
    ).id
    assert c.drift.references_of(mid) == ()


def test_a_memory_checked_recently_is_not_checked_again_until_updated(open_store):
    c = open_store(embedding="local", drift={"recheck_seconds": 3600})
    doc = _ingest(c, NOTE_V1, "alpha-status")
    mid = c.memories.remember(RememberInput(content=f"{BLOCKER} See [[alpha-status]].")).id
    c.drift.drain()  # checked once, when written (its baseline)
    v2 = _swap(c, doc, NOTE_V2)
    _recall(c)
    assert _rows(c) == []  # checked minutes ago: not again yet
    assert _baseline(c, mid)[1] == doc
    c.memories.update(mid, {"content": f"{BLOCKER} Still true? See [[alpha-status]]."})
    c.drift.drain()
    assert _baseline(c, mid)[1] == v2  # the update cleared it: checked again at once, against the note as it is


def _stored_sentences(c, doc: str):
    return c.db.read(
        lambda conn: conn.execute(
            "SELECT text_hash, sentences, dimensions, created_at FROM drift_sentence_vectors WHERE document_id = ?",
            (doc,),
        ).fetchall()
    )


def test_sentence_vectors_are_stored_and_read_back_after_a_restart(open_store, tmp_path: Path):
    home = tmp_path / "persist-home"
    c = open_store(home=home, embedding="local", drift={"recheck_seconds": 0})
    doc = _ingest(c, NOTE_V1, "alpha-status")
    seq = c.memories.get(c.memories.remember(RememberInput(content=f"{BLOCKER} See [[alpha-status]].")).id).seq
    c.drift.drain()  # the baseline check the write queued embeds the sentences once
    first = c.drift.similarities([(seq, doc)])[0]
    (row,) = _stored_sentences(c, doc)
    assert row[1] >= 3 and row[2] == c.drift.index.dimensions  # three sentences of NOTE_V1 at least
    c.close()

    c2 = open_store(home=home, embedding="local", drift={"recheck_seconds": 0})
    assert c2.drift.similarities([(seq, doc)])[0] == pytest.approx(first, abs=1e-6)
    assert _stored_sentences(c2, doc) == [row]  # read, not embedded and written again
    # a new version of the text replaces the row
    chunks = c2.db.read(
        lambda conn: conn.execute(
            "SELECT m.content FROM document_memories dm JOIN memories m ON m.id = dm.memory_id "
            "WHERE dm.document_id = ? ORDER BY dm.chunk_index",
            (doc,),
        ).fetchall()
    )
    c2.drift.sentence_vectors(doc, [chunks[0][0] + " The release date moved to April."])
    (row2,) = _stored_sentences(c2, doc)
    assert row2[0] != row[0] and row2[1] == row[1] + 1
