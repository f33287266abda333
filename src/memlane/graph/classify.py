"""The structural classification worker (memory-pipeline-v2.md "Structural Classification").

Jobs of type ``structural_classify`` (one pending per entity, queued by
:func:`memlane.graph.store.persist_extraction` when it adds unclassified attributes) are leased
by their own :class:`~memlane.workers.runtime.JobWorker`. A job takes the entity's
unclassified attributes in batches of :data:`CLASSIFY_BATCH_SIZE` (all facts of one entity in
one LLM call), and for each assigns an aspect and a kind (``attribute`` | ``constraint``):

* with an LLM: the prompt gives the entity name, type, existing aspects and suggested aspect
  names (:data:`ASPECT_SUGGESTIONS` by type); the reply is a JSON array of
  ``{"i", "aspect", "kind", "new"}`` (or an object ``{"type", "assignments": [...]}`` when the
  entity's type is ``extracted``: a valid canonical type is then stored). Items the reply
  misses or gets wrong fall back to the deterministic rule;
* without an LLM (none configured): the deterministic rule only: the linker's verb patterns
  (:func:`memlane.graph.linker.infer_aspect`) and the decision battery
  (:mod:`memlane.graph.protection`: constraint, importance 0.85). The type is left as is.

The LLM call runs outside any transaction; the writes go in one ``db.write``. An LLM error
fails the job (retried with backoff, then ``dead``); the attributes stay unclassified.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from memlane.config.clock import now_iso
from memlane.graph import names
from memlane.graph.linker import infer_aspect
from memlane.graph.protection import CONSTRAINT, DECISION_IMPORTANCE, DEFAULT_IMPORTANCE, protection_for
from memlane.graph.store import CLASSIFY_JOB
from memlane.providers.base import LlmProvider, strip_fences, strip_think
from memlane.storage import graph as graph_sql
from memlane.storage.db import Database
from memlane.storage.jobs import Job
from memlane.workers.runtime import SkipJob

log = logging.getLogger(__name__)

JOB_TYPE = CLASSIFY_JOB
#: The name of the JobWorker running :data:`JOB_TYPE` jobs in the container's registry.
CLASSIFY_WORKER = "structural-classify"
#: Facts per entity per LLM call (seed: structural.classifyBatchSize).
CLASSIFY_BATCH_SIZE = 10
#: Batches one job handles before it stops (the rest wait for the next enqueue).
MAX_BATCHES = 10
#: Longest aspect name kept, characters.
MAX_ASPECT_CHARS = 60

#: Suggested aspect names by entity type (seed: ASPECT_SUGGESTIONS).
ASPECT_SUGGESTIONS: dict[str, tuple[str, ...]] = {
    "person": ("preferences", "background", "relationships", "roles", "activities", "perspectives"),
    "project": ("architecture", "dependencies", "decisions", "conventions", "status", "plans"),
    "system": ("configuration", "dependencies", "behaviour", "failures", "deployment"),
    "tool": ("usage", "configuration", "limitations", "versions", "alternatives"),
    "concept": ("definition", "properties", "examples", "related ideas"),
    "skill": ("proficiency", "practice", "resources"),
    "task": ("status", "steps", "blockers", "deadline"),
    "unknown": ("properties", "general"),
    names.UNTYPED: ("properties", "decisions", "dependencies", "general"),
}


def build_prompt(entity: graph_sql.Entity, aspects: list[str], facts: list[str]) -> str:
    """The classification prompt for one entity and a batch of its facts (numbered from 0)."""
    suggestions = ASPECT_SUGGESTIONS.get(entity.entity_type, ASPECT_SUGGESTIONS["unknown"])
    lines = [
        "Assign each fact about an entity to one aspect of that entity and classify it.",
        f"Entity: {entity.name}",
        f"Entity type: {entity.entity_type}",
        f"Existing aspects: {', '.join(aspects) if aspects else '(none)'}",
        f"Suggested aspects: {', '.join(suggestions)}",
        "Facts:",
        *[f"{i}. {f}" for i, f in enumerate(facts)],
        "",
        'For each fact return {"i": <fact number>, "aspect": <short aspect name>, '
        '"kind": "attribute" or "constraint" (a rule or decision that must hold), '
        '"new": true if the aspect is not an existing one}.',
    ]
    if entity.entity_type == names.UNTYPED:
        lines.append(
            f"Also infer the entity type, one of: {', '.join(sorted(names.CANONICAL_TYPES))}. "
            'Return a JSON object {"type": <type>, "assignments": [ ... ]}.'
        )
    else:
        lines.append('Return a JSON object {"assignments": [ ... ]}.')
    lines.append("Return only JSON, no other text.")
    return "\n".join(lines)


def reply_schema(entity: graph_sql.Entity) -> dict[str, Any]:
    """The JSON schema of :func:`build_prompt`'s reply (structured output): ``{"assignments":
    [{i, aspect, kind, new}]}``, plus ``type`` (a canonical entity type) for an untyped entity.
    :func:`parse_reply` also reads a bare array, from providers without structured output."""
    item = {
        "type": "object",
        "required": ["i", "aspect", "kind"],
        "properties": {
            "i": {"type": "integer", "minimum": 0},
            "aspect": {"type": "string"},
            "kind": {"type": "string", "enum": ["attribute", CONSTRAINT]},
            "new": {"type": "boolean"},
        },
    }
    props: dict[str, Any] = {"assignments": {"type": "array", "items": item}}
    if entity.entity_type == names.UNTYPED:
        props["type"] = {"type": "string", "enum": sorted(names.CANONICAL_TYPES)}
    return {"type": "object", "properties": props, "required": sorted(props)}


def parse_reply(text: str, n_facts: int) -> tuple[dict[int, tuple[str, str]], str | None]:
    """``({fact index: (aspect name, kind)}, inferred type or None)`` from an LLM reply;
    invalid items are dropped (never raises)."""
    body = strip_fences(strip_think(text or "")).strip()
    data: Any = None
    # The outermost JSON value: whichever of "[" and "{" comes first.
    pairs = sorted((("[", "]"), ("{", "}")), key=lambda p: body.find(p[0]) % (len(body) + 1))
    for opener, closer in pairs:
        i, j = body.find(opener), body.rfind(closer)
        if 0 <= i < j:
            try:
                data = json.loads(body[i : j + 1])
                break
            except ValueError:
                continue
    etype = None
    if isinstance(data, dict):
        t = names.entity_type(data.get("type"))
        etype = t if t != names.UNTYPED else None
        data = data.get("assignments")
    out: dict[int, tuple[str, str]] = {}
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict):
            continue
        fact, aspect, kind = item.get("i"), item.get("aspect"), item.get("kind")
        if isinstance(fact, bool) or not isinstance(fact, int) or not 0 <= fact < n_facts:
            continue
        if not isinstance(aspect, str) or not names.canonical_name(aspect):
            continue
        out[fact] = (
            names.clean_name(aspect)[:MAX_ASPECT_CHARS],
            kind if kind in ("attribute", CONSTRAINT) else "attribute",
        )
    return out, etype


def deterministic(content: str) -> tuple[str, str]:
    """``(aspect, kind)`` without a model: verb-pattern aspect, decision battery kind."""
    return infer_aspect(content), protection_for(content).kind


class ClassifyHandler:
    """``handler(job) -> dict`` for ``structural_classify`` jobs.

    Args:
        db: the database.
        llm: returns the extraction LLM or None (read per job).
        batch_size: facts per LLM call.
        now: clock, ISO-8601 UTC.

    Raises (from a call):
        SkipJob: the entity is gone or has nothing unclassified.
        LlmError: the LLM failed (the job is retried).
    """

    def __init__(
        self,
        db: Database,
        llm: Callable[[], LlmProvider | None],
        *,
        batch_size: int = CLASSIFY_BATCH_SIZE,
        now: Callable[[], str] = now_iso,
    ) -> None:
        self.db = db
        self.llm = llm
        self.batch_size = batch_size
        self.now = now

    def __call__(self, job: Job) -> dict[str, Any]:
        entity_id = job.payload.get("entity_id") or job.dedup_key
        if not isinstance(entity_id, str):
            raise SkipJob("job has no entity_id")
        done = llm_items = batches = 0
        typed = None
        for _ in range(MAX_BATCHES):
            entity, attrs, aspects = self.db.read(
                lambda c: (
                    graph_sql.get_entity(c, entity_id),
                    graph_sql.unclassified_attributes(c, entity_id, self.batch_size),
                    [a.name for a in graph_sql.aspects_of_entity(c, entity_id)],
                )
            )
            if entity is None:
                raise SkipJob(f"entity {entity_id} no longer exists")
            if not attrs:
                break
            plan, etype, from_llm = self._classify(entity, aspects, attrs)
            llm_items += from_llm
            self.db.write(lambda c: self._write(c, entity, attrs, plan, etype))
            typed = typed or etype
            done += len(attrs)
            batches += 1
            if len(attrs) < self.batch_size:
                break
        if not done:
            raise SkipJob("nothing to classify")
        return {
            "entity_id": entity_id,
            "classified": done,
            "by_llm": llm_items,
            "batches": batches,
            "entity_type": typed,
        }

    def _classify(
        self, entity: graph_sql.Entity, aspects: list[str], attrs: list[graph_sql.Attribute]
    ) -> tuple[list[tuple[str, str]], str | None, int]:
        fallback = [deterministic(a.content) for a in attrs]
        llm = self.llm()
        if llm is None:
            return fallback, None, 0
        reply = llm.generate(build_prompt(entity, aspects, [a.content for a in attrs]), schema=reply_schema(entity))
        parsed, etype = parse_reply(reply, len(attrs))
        plan = [parsed.get(i, fallback[i]) for i in range(len(attrs))]
        return plan, etype if entity.entity_type == names.UNTYPED else None, len(parsed)

    def _write(
        self,
        conn: Any,
        entity: graph_sql.Entity,
        attrs: list[graph_sql.Attribute],
        plan: list[tuple[str, str]],
        etype: str | None,
    ) -> None:
        at = self.now()
        for attr, (aspect, kind) in zip(attrs, plan):
            aspect_id = graph_sql.upsert_aspect(
                conn,
                aspect_id=str(uuid.uuid4()),
                entity_id=entity.id,
                name=aspect,
                canonical=names.canonical_name(aspect),
                at=at,
            )
            graph_sql.classify_attribute(
                conn,
                attr.id,
                aspect_id=aspect_id,
                kind=kind,
                at=at,
                importance=DECISION_IMPORTANCE if kind == CONSTRAINT else DEFAULT_IMPORTANCE,
            )
        if etype is not None:
            graph_sql.set_entity_type(conn, entity.id, etype, at)
