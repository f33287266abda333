"""SQL for memory references and prediction errors (migration 0013; docs/drift.md).

Functions take the caller's connection; those that write must run inside a write transaction
(``Database.write``). Timestamps are ISO-8601 UTC strings (ms, ``Z``).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from memlane.storage.db import inserted_rowid

#: Every prediction-error type a memory-centric row may have.
ERROR_TYPES = ("memory_drift", "memory_external_signal", "memory_stale_file", "memory_stale_entity")


@dataclass(frozen=True, slots=True)
class Reference:
    """One stored reference of a memory: ``kind`` document | file | entity; ``raw`` as written;
    ``target`` the resolved key (document id, path relative to the project root, entity id)."""

    memory_id: str
    kind: str
    raw: str
    target: str
    stale_at: str | None = None
    stale_reason: str | None = None


# Not slotted: the MCP tools' ErrorRow extends it, and the MCP SDK builds an output schema from a
# class's attributes, where a slot descriptor would read as a default.
@dataclass(frozen=True)
class PredictionError:
    """One ``prediction_errors`` row; ``context`` is the decoded JSON object."""

    error_id: int
    memory_id: str
    target: str
    query: str
    cosine_distance: float
    error_type: str
    weight: float
    context: dict[str, Any]
    detected_at: str
    resolved_at: str | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able view."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


_PE_COLS = "error_id, memory_id, target, query, cosine_distance, error_type, weight, context, detected_at, resolved_at"


def _pe(r: Sequence[Any]) -> PredictionError:
    try:
        ctx = json.loads(r[7]) if r[7] else {}
    except ValueError:
        ctx = {}
    return PredictionError(
        int(r[0]), r[1], r[2], r[3], float(r[4]), r[5], float(r[6]), ctx if isinstance(ctx, dict) else {}, r[8], r[9]
    )


# -- references -----------------------------------------------------------------------------
def replace_references(conn: sqlite3.Connection, memory_id: str, refs: Iterable[Reference], *, at: str) -> int:
    """Make ``refs`` the memory's only references (re-extraction after an update). Returns the count."""
    conn.execute("DELETE FROM memory_references WHERE memory_id = ?", (memory_id,))
    rows = {(r.kind, r.target): r for r in refs}
    conn.executemany(
        "INSERT INTO memory_references(memory_id, kind, raw, target, created_at) VALUES (?, ?, ?, ?, ?)",
        [(memory_id, r.kind, r.raw, r.target, at) for r in rows.values()],
    )
    return len(rows)


def references(conn: sqlite3.Connection, memory_ids: Sequence[str] | None = None) -> list[Reference]:
    """References of the given memories (all memories' when None), live memories only."""
    sql = (
        "SELECT r.memory_id, r.kind, r.raw, r.target, r.stale_at, r.stale_reason FROM memory_references r "
        "JOIN memories m ON m.id = r.memory_id WHERE m.is_deleted = 0"
    )
    args: list[Any] = []
    if memory_ids is not None:
        if not memory_ids:
            return []
        sql += f" AND r.memory_id IN ({','.join('?' * len(memory_ids))})"
        args = list(memory_ids)
    return [Reference(*r) for r in conn.execute(sql + " ORDER BY r.id", args)]


@dataclass(frozen=True, slots=True)
class Baseline:
    """A document reference's drift baseline (migration 0020): the max cosine similarity
    ``similarity`` between the memory's claim and ``document`` measured with ``model``, and the
    claim's ``slots`` (numbers, versions, identifiers) its own sentence in the document held."""

    similarity: float
    model: str
    document: str
    slots: frozenset[str] = frozenset()


def baselines(conn: sqlite3.Connection, memory_ids: Sequence[str]) -> dict[tuple[str, str], Baseline]:
    """``(memory id, raw) -> Baseline`` of the memories' document references that have one."""
    if not memory_ids:
        return {}
    out: dict[tuple[str, str], Baseline] = {}
    for i in range(0, len(memory_ids), 500):
        part = list(memory_ids[i : i + 500])
        for mid, raw, sim, model, doc, held in conn.execute(
            "SELECT memory_id, raw, baseline_similarity, baseline_model, baseline_document, baseline_slots "
            "FROM memory_references "
            f"WHERE kind = 'document' AND baseline_similarity IS NOT NULL AND memory_id IN ({','.join('?' * len(part))})",
            part,
        ):
            try:
                found = json.loads(held) if held else []
            except ValueError:
                found = []
            out[(mid, raw)] = Baseline(
                float(sim),
                model,
                doc,
                frozenset(x for x in found if isinstance(x, str)) if isinstance(found, list) else frozenset(),
            )
    return out


def set_baselines(conn: sqlite3.Connection, rows: Iterable[tuple[str, str, Baseline]], *, at: str) -> int:
    """Store ``(memory id, raw, baseline)`` on the memories' document references (replacing an
    older one). Returns the number of references updated (a reference re-extracted meanwhile
    under another raw text is not)."""
    n = 0
    for mid, raw, b in rows:
        n += conn.execute(
            "UPDATE memory_references SET baseline_similarity = ?, baseline_model = ?, baseline_document = ?, "
            "baseline_slots = ?, baseline_at = ? WHERE memory_id = ? AND kind = 'document' AND raw = ?",
            (b.similarity, b.model, b.document, json.dumps(sorted(b.slots)), at, mid, raw),
        ).rowcount
    return n


def file_references(conn: sqlite3.Connection, project: str | None = None) -> list[tuple[Reference, str, str]]:
    """Every live memory's file references with the memory's project root and creation time:
    ``(reference, project, created_at)``, optionally of one project only."""
    sql = (
        "SELECT r.memory_id, r.kind, r.raw, r.target, r.stale_at, r.stale_reason, m.project, m.created_at "
        "FROM memory_references r JOIN memories m ON m.id = r.memory_id "
        "WHERE r.kind = 'file' AND m.is_deleted = 0 AND m.project IS NOT NULL"
    )
    args: list[Any] = []
    if project is not None:
        sql += " AND m.project = ?"
        args.append(project)
    return [(Reference(*r[:6]), r[6], r[7]) for r in conn.execute(sql + " ORDER BY r.id", args)]


def mark_file_stale(conn: sqlite3.Connection, memory_id: str, target: str, *, reason: str, at: str) -> bool:
    """Mark a file reference stale (first time only). Returns True when it was not stale before."""
    return (
        conn.execute(
            "UPDATE memory_references SET stale_at = ?, stale_reason = ? "
            "WHERE memory_id = ? AND kind = 'file' AND target = ? AND stale_at IS NULL",
            (at, reason, memory_id, target),
        ).rowcount
        > 0
    )


def rename_file(conn: sqlite3.Connection, memory_id: str, old: str, new: str) -> bool:
    """Rewrite a file reference ``old`` -> ``new`` (a rename seen in git); clears its staleness.
    Returns False when the memory already references ``new`` (the old row is then dropped)."""
    try:
        return (
            conn.execute(
                "UPDATE memory_references SET target = ?, stale_at = NULL, stale_reason = NULL "
                "WHERE memory_id = ? AND kind = 'file' AND target = ?",
                (new, memory_id, old),
            ).rowcount
            > 0
        )
    except sqlite3.IntegrityError:
        conn.execute(
            "DELETE FROM memory_references WHERE memory_id = ? AND kind = 'file' AND target = ?", (memory_id, old)
        )
        return False


# -- documents (resolution and chunks) ------------------------------------------------------
def live_documents(conn: sqlite3.Connection) -> list[tuple[str, str | None, str | None, str]]:
    """Every live document: ``(id, source_url, title, created_at)``, oldest first."""
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT id, source_url, title, created_at FROM documents WHERE deleted_at IS NULL "
            "ORDER BY created_at, rowid"
        )
    ]


def document_title(conn: sqlite3.Connection, document_id: str) -> str | None:
    """A document's title (or URL when untitled), None when unknown."""
    r = conn.execute("SELECT coalesce(title, source_url) FROM documents WHERE id = ?", (document_id,)).fetchone()
    return r[0] if r else None


def chunk_rows(conn: sqlite3.Connection, document_ids: Sequence[str]) -> dict[str, list[tuple[int, str]]]:
    """The live chunk memories of each document: ``(seq, content)`` in chunk order."""
    if not document_ids:
        return {}
    out: dict[str, list[tuple[int, str]]] = {d: [] for d in document_ids}
    for doc, seq, content in conn.execute(
        "SELECT dm.document_id, m.seq, m.content FROM document_memories dm JOIN memories m ON m.id = dm.memory_id "
        f"WHERE dm.document_id IN ({','.join('?' * len(document_ids))}) AND m.is_deleted = 0 "
        "ORDER BY dm.chunk_index",
        list(document_ids),
    ):
        out[doc].append((int(seq), content))
    return out


def chunk_seqs(conn: sqlite3.Connection, document_ids: Sequence[str]) -> dict[str, list[int]]:
    """The live chunk memories' seqs of each document (the document's current chunks)."""
    if not document_ids:
        return {}
    out: dict[str, list[int]] = {d: [] for d in document_ids}
    for doc, seq in conn.execute(
        "SELECT dm.document_id, m.seq FROM document_memories dm JOIN memories m ON m.id = dm.memory_id "
        f"WHERE dm.document_id IN ({','.join('?' * len(document_ids))}) AND m.is_deleted = 0 "
        "ORDER BY dm.chunk_index",
        list(document_ids),
    ):
        out[doc].append(int(seq))
    return out


# -- prediction errors ----------------------------------------------------------------------
def record(
    conn: sqlite3.Connection,
    *,
    memory_id: str,
    error_type: str,
    target: str,
    distance: float,
    context: dict[str, Any],
    at: str,
    debounce_since: str | None,
    weight: float = 1.0,
    query: str | None = None,
) -> tuple[int, bool]:
    """Write a prediction error, debounced: an open row for the same (memory, target, type) detected
    at or after ``debounce_since`` is updated in place, keeping the strongest signal (the larger
    ``cosine_distance`` with its context). ``debounce_since`` None: always a new row.

    Returns ``(error_id, created)``.
    """
    if debounce_since is not None:
        row = conn.execute(
            "SELECT error_id, cosine_distance FROM prediction_errors WHERE memory_id = ? AND target = ? "
            "AND error_type = ? AND resolved_at IS NULL AND detected_at >= ? ORDER BY error_id DESC LIMIT 1",
            (memory_id, target, error_type, debounce_since),
        ).fetchone()
        if row is not None:
            if distance > float(row[1]):
                conn.execute(
                    "UPDATE prediction_errors SET cosine_distance = ?, context = ?, weight = ? WHERE error_id = ?",
                    (distance, json.dumps(context), weight, row[0]),
                )
            return int(row[0]), False
    cur = conn.execute(
        "INSERT INTO prediction_errors(memory_id, target, query, cosine_distance, error_type, weight, context, "
        "detected_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (memory_id, target, query or f"memory:{memory_id}", distance, error_type, weight, json.dumps(context), at),
    )
    return inserted_rowid(cur), True


def resolve_memory(conn: sqlite3.Connection, memory_id: str, *, at: str) -> int:
    """Resolve every open row of a memory (it was updated). Returns rows resolved."""
    return conn.execute(
        "UPDATE prediction_errors SET resolved_at = ? WHERE memory_id = ? AND resolved_at IS NULL", (at, memory_id)
    ).rowcount


def resolve(conn: sqlite3.Connection, error_id: int, *, at: str) -> bool:
    """Resolve one row (a false positive dismissed). Returns False when unknown or already resolved."""
    return (
        conn.execute(
            "UPDATE prediction_errors SET resolved_at = ? WHERE error_id = ? AND resolved_at IS NULL", (at, error_id)
        ).rowcount
        > 0
    )


def delete_memory(conn: sqlite3.Connection, memory_id: str) -> int:
    """Remove a forgotten memory's rows and references. Returns prediction errors removed."""
    conn.execute("DELETE FROM memory_references WHERE memory_id = ?", (memory_id,))
    return conn.execute("DELETE FROM prediction_errors WHERE memory_id = ?", (memory_id,)).rowcount


def open_errors(conn: sqlite3.Connection) -> list[PredictionError]:
    """Every unresolved row of a live memory (the retrieval rules' flags), oldest first."""
    return [
        _pe(r)
        for r in conn.execute(
            f"SELECT {', '.join('p.' + c.strip() for c in _PE_COLS.split(','))} FROM prediction_errors p "
            "JOIN memories m ON m.id = p.memory_id WHERE p.resolved_at IS NULL AND m.is_deleted = 0 "
            "ORDER BY p.error_id"
        )
    ]


def list_errors(
    conn: sqlite3.Connection,
    *,
    error_type: str | None = None,
    memory_id: str | None = None,
    resolved: bool | None = False,
    limit: int = 50,
    offset: int = 0,
) -> list[tuple[PredictionError, dict[str, Any]]]:
    """Prediction errors newest first, each with its memory (``id, content, type, tags, project,
    created_at, updated_at, confidence``). ``resolved``: False = open only, True = resolved only,
    None = both."""
    where, args = ["1=1"], []
    if error_type is not None:
        where.append("p.error_type = ?")
        args.append(error_type)
    if memory_id is not None:
        where.append("p.memory_id = ?")
        args.append(memory_id)
    if resolved is not None:
        where.append("p.resolved_at IS NOT NULL" if resolved else "p.resolved_at IS NULL")
    cols = ", ".join("p." + c.strip() for c in _PE_COLS.split(","))
    rows = conn.execute(
        f"SELECT {cols}, m.content, m.type, m.tags, m.project, m.created_at, m.updated_at, m.confidence "
        f"FROM prediction_errors p JOIN memories m ON m.id = p.memory_id WHERE {' AND '.join(where)} "
        "ORDER BY p.error_id DESC LIMIT ? OFFSET ?",
        (*args, int(limit), int(offset)),
    ).fetchall()
    out = []
    for r in rows:
        mem = {
            "id": r[1],
            "content": r[10],
            "type": r[11],
            "tags": json.loads(r[12] or "[]"),
            "project": r[13],
            "created_at": r[14],
            "updated_at": r[15],
            "confidence": float(r[16]),
        }
        out.append((_pe(r[:10]), mem))
    return out


def set_confidence(conn: sqlite3.Connection, changes: dict[str, float], *, at: str) -> int:
    """Store new confidences (each clipped to [0, 1]) of live memories. Returns rows changed."""
    n = 0
    for mid, value in changes.items():
        n += conn.execute(
            "UPDATE memories SET confidence = ? WHERE id = ? AND is_deleted = 0",
            (min(1.0, max(0.0, float(value))), mid),
        ).rowcount
    return n


def confidences(conn: sqlite3.Connection, memory_ids: Sequence[str]) -> dict[str, float]:
    """Current confidence of the given live memories."""
    if not memory_ids:
        return {}
    return {
        r[0]: float(r[1])
        for r in conn.execute(
            f"SELECT id, confidence FROM memories WHERE is_deleted = 0 AND id IN ({','.join('?' * len(memory_ids))})",
            list(memory_ids),
        )
    }


def resolve_target(conn: sqlite3.Connection, memory_id: str, target: str, error_type: str, *, at: str) -> int:
    """Resolve a memory's open rows of one type about one target (a renamed file). Returns rows."""
    return conn.execute(
        "UPDATE prediction_errors SET resolved_at = ? WHERE memory_id = ? AND target = ? "
        "AND error_type = ? AND resolved_at IS NULL",
        (at, memory_id, target, error_type),
    ).rowcount


def get_errors(conn: sqlite3.Connection, error_ids: Sequence[int]) -> list[PredictionError]:
    """The rows with these ids, by id."""
    if not error_ids:
        return []
    return [
        _pe(r)
        for r in conn.execute(
            f"SELECT {_PE_COLS} FROM prediction_errors WHERE error_id IN ({','.join('?' * len(error_ids))}) "
            "ORDER BY error_id",
            list(error_ids),
        )
    ]


def seqs_of(conn: sqlite3.Connection, memory_ids: Sequence[str]) -> dict[str, int]:
    """``memory id -> seq`` of the given live memories."""
    if not memory_ids:
        return {}
    return {
        r[0]: int(r[1])
        for r in conn.execute(
            f"SELECT id, seq FROM memories WHERE is_deleted = 0 AND id IN ({','.join('?' * len(memory_ids))})",
            list(memory_ids),
        )
    }


def session_count(conn: sqlite3.Connection, project: str | None) -> int:
    """Sessions recorded for a project."""
    return int(conn.execute("SELECT count(*) FROM sessions WHERE project IS ?", (project,)).fetchone()[0])


def referencing_projects(conn: sqlite3.Connection) -> dict[str, str | None]:
    """``memory_id -> project`` of every memory (deleted or not) holding a document or file
    reference (the ones checked at retrieval)."""
    return dict(
        conn.execute(
            "SELECT DISTINCT m.id, m.project FROM memory_references r JOIN memories m ON m.id = r.memory_id "
            "WHERE r.kind IN ('document', 'file')"
        ).fetchall()
    )


def contents_by_seq(conn: sqlite3.Connection, seqs: Sequence[int]) -> dict[int, str]:
    """``seq -> content`` of the given live memories."""
    if not seqs:
        return {}
    return {
        int(r[0]): r[1]
        for r in conn.execute(
            f"SELECT seq, content FROM memories WHERE is_deleted = 0 AND seq IN ({','.join('?' * len(seqs))})",
            list(seqs),
        )
    }


def entity_dependents(conn: sqlite3.Connection, entity_id: str, aspect_id: str, exclude: Sequence[str]) -> list[str]:
    """Live memories, other than ``exclude``, with an ``entity`` reference to ``entity_id`` and an
    active attribute of that entity in ``aspect_id``: the memories whose claim about that facet of
    the entity depends on it (``idx_memory_references_target``, ``idx_attributes_aspect``)."""
    skip = list(exclude) or [""]
    return [
        r[0]
        for r in conn.execute(
            "SELECT DISTINCT r.memory_id FROM memory_references r JOIN memories m ON m.id = r.memory_id "
            "JOIN entity_attributes a ON a.memory_id = r.memory_id AND a.entity_id = r.target "
            "WHERE r.kind = 'entity' AND r.target = ? AND a.aspect_id = ? AND a.status = 'active' "
            f"AND m.is_deleted = 0 AND m.superseded_by IS NULL AND r.memory_id NOT IN ({','.join('?' * len(skip))}) "
            "ORDER BY r.memory_id",
            [entity_id, aspect_id, *skip],
        )
    ]


def sentence_vectors(conn: sqlite3.Connection, document_id: str, model: str, text_hash: str) -> np.ndarray | None:
    """The stored sentence vectors ``[n, dimensions]`` (float32) of a document's text version
    ``text_hash`` for ``model``, or None when none are stored for that version (migration 0017)."""
    row = conn.execute(
        "SELECT sentences, dimensions, vectors FROM drift_sentence_vectors "
        "WHERE document_id = ? AND model = ? AND text_hash = ?",
        (document_id, model, text_hash),
    ).fetchone()
    if row is None or len(row[2]) != int(row[0]) * int(row[1]) * 4:
        return None
    return np.frombuffer(row[2], dtype="<f4").reshape(int(row[0]), int(row[1])).astype(np.float32)


def put_sentence_vectors(
    conn: sqlite3.Connection, document_id: str, model: str, text_hash: str, vectors: np.ndarray, *, at: str
) -> bool:
    """Store a document's sentence vectors ``[n, d]`` for ``model``, replacing another version's.
    False (nothing stored) when the document is gone."""
    if conn.execute("SELECT 1 FROM documents WHERE id = ?", (document_id,)).fetchone() is None:
        return False
    v = np.ascontiguousarray(vectors, dtype="<f4")
    conn.execute(
        "INSERT INTO drift_sentence_vectors(document_id, model, text_hash, sentences, dimensions, vectors, "
        "created_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(document_id, model) DO UPDATE SET "
        "text_hash = excluded.text_hash, sentences = excluded.sentences, dimensions = excluded.dimensions, "
        "vectors = excluded.vectors, created_at = excluded.created_at",
        (document_id, model, text_hash, int(v.shape[0]), int(v.shape[1]), v.tobytes(), at),
    )
    return True
