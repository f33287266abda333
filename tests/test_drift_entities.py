"""Knowledge-graph invalidation (issue 41, file staleness layer 3; docs/drift.md "Entity
staleness"), on real SQLite with the real inline entity linker: entity references are written
for linked memories; superseding a memory supersedes the graph attributes taken from it, and the
memories that state something about the same entity and aspect get a ``memory_stale_entity``
row: never injected at session-start, returned by recall with the penalty and a warning naming
the entity; updating such a memory resolves it; deleting / recovering a memory deletes /
restores its attributes without flagging anyone."""

from __future__ import annotations

from memlane.services.inputs import RecallQuery, RememberInput
from memlane.sessions.inputs import StartInput
from memlane.storage import drift as drift_sql
from memlane.storage import graph as graph_sql

SOURCE = "Postgres is the primary database for the billing service."
DEPENDENT = "Postgres is hosted on the db1 machine in the basement."
OTHER_ASPECT = "Postgres must never be restarted during business hours."
NEWER = "Postgres is no longer the primary database; billing moved to a hosted service."


def _remember(c, content: str) -> str:
    return c.memories.remember(RememberInput(content=content, importance=0.9)).id


def _postgres(c):
    e = c.db.read(lambda conn: graph_sql.entity_by_name(conn, "Postgres"))
    assert e is not None
    return e


def _attrs(c, memory_id: str):
    return c.db.read(
        lambda conn: conn.execute(
            "SELECT status, superseded_by, aspect_id FROM entity_attributes WHERE memory_id = ?", (memory_id,)
        ).fetchall()
    )


def test_entity_references_are_written_for_linked_memories(store):
    c = store
    m = _remember(c, SOURCE)
    e = _postgres(c)
    refs = c.db.read(lambda conn: drift_sql.references(conn, [m]))
    assert [(r.kind, r.raw, r.target) for r in refs] == [("entity", "Postgres", e.id)]
    assert c.drift.references_of(m) == ()  # nothing to check at retrieval
    # an update re-extracts them (the linker's links stay)
    c.memories.update(m, {"content": SOURCE + " It runs version 16."})
    refs = c.db.read(lambda conn: drift_sql.references(conn, [m]))
    assert [(r.kind, r.target) for r in refs] == [("entity", e.id)]


def test_superseding_a_memory_flags_the_memories_on_the_same_entity_aspect(store):
    c = store
    src, dep, other = _remember(c, SOURCE), _remember(c, DEPENDENT), _remember(c, OTHER_ASPECT)
    e = _postgres(c)
    new = _remember(c, NEWER)
    assert not c.drift.flags_of(dep)
    c.memories.supersede(src, new)

    # the graph: the source's attribute is superseded by the newer memory's on the same aspect
    ((status, by, aspect),) = _attrs(c, src)
    ((_, _, new_aspect),) = _attrs(c, new)
    assert status == "superseded" and aspect == new_aspect
    assert by == c.db.read(
        lambda conn: conn.execute("SELECT id FROM entity_attributes WHERE memory_id = ?", (new,)).fetchone()[0]
    )

    rows = c.drift.list(error_type="memory_stale_entity")
    assert [(r["memory_id"], r["target"]) for r in rows] == [(dep, e.id)]
    assert rows[0]["context"]["entity"] == "Postgres" and rows[0]["context"]["superseded_by"] == new
    assert rows[0]["memory"]["content"] == DEPENDENT
    assert not c.drift.flags_of(other) and not c.drift.flags_of(new)

    # recall: returned, penalised, with a warning that names the entity
    hits = c.recall.recall(RecallQuery(query="Postgres hosted db1 machine basement", limit=10, touch=False)).hits
    hit = next(h for h in hits if h.memory.id == dep)
    assert hit.memory.content.startswith("[STALE: entity 'Postgres' (properties) was superseded] ")
    assert hit.memory.confidence == c.memories.get(dep).confidence * (1 - c.settings.drift.penalty)

    # session-start: never injected proactively; the memory on another aspect still is
    start = c.sessions.start(StartInput("s-entity", context="Postgres database db1 machine business hours"))
    ids = {x["id"] for x in start.injected}
    assert dep not in ids and other in ids

    # a second supersede in the debounce window updates the row instead of adding one
    newest = _remember(c, "Postgres is the reporting database now.")
    c.memories.supersede(new, newest)
    assert len(c.drift.list(error_type="memory_stale_entity", memory_id=dep)) == 1

    # updating the dependent memory resolves its row and it is trusted again
    c.memories.update(dep, {"content": "Postgres is hosted on the db2 machine in the data centre."})
    assert not c.drift.flags_of(dep)
    assert c.drift.list(error_type="memory_stale_entity", memory_id=dep, resolved=True)


def test_delete_and_recover_change_the_attributes_and_flag_nobody(store):
    c = store
    src, dep = _remember(c, SOURCE), _remember(c, DEPENDENT)
    c.memories.delete(src)
    assert [s for s, _, _ in _attrs(c, src)] == ["deleted"]
    assert c.drift.list(error_type="memory_stale_entity") == [] and not c.drift.flags_of(dep)
    c.memories.recover(src)
    assert [s for s, _, _ in _attrs(c, src)] == ["active"]


def test_drift_disabled_flags_nothing_but_the_graph_still_follows(open_store):
    c = open_store(drift={"enabled": False})
    src, dep = _remember(c, SOURCE), _remember(c, DEPENDENT)
    new = _remember(c, NEWER)
    c.memories.supersede(src, new)
    assert [s for s, _, _ in _attrs(c, src)] == ["superseded"]
    assert c.drift.list(error_type="memory_stale_entity") == [] and not c.drift.flags_of(dep)
