"""Decision: for each extracted fact, ADD / UPDATE / DELETE / NONE against the store
(memory-pipeline-v2.md "Decision Stage").

* :func:`find_candidates` -- the top 5 live, not superseded memories by hybrid search: the
  BM25 leg (FTS5 on the fact's content) and the vector leg (the fact's embedding against the
  in-memory index), merged with ``alpha * vector + (1 - alpha) * bm25`` (``recall.hybrid.merge``;
  the single available leg otherwise), below ``recall.min_score`` dropped.
* :func:`parse_decision` -- reply -> :class:`Proposal`: action one of the four; UPDATE and
  DELETE must name a ``targetId`` from the candidate set (a missing or hallucinated id drops
  the proposal with a warning); an empty reason is rejected.
* :func:`run_shadow_decisions` -- every fact in turn; no candidates = ADD without an LLM call.
  "Shadow" means this function writes nothing; applying proposals is :mod:`memlane.pipeline.writes`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from memlane.config import RecallSettings
from memlane.normalize import normalize_and_hash
from memlane.pipeline.extraction import Fact, parse_json_reply
from memlane.pipeline.prompts import DECISION_SCHEMA, decision_prompt
from memlane.providers.base import LlmProvider
from memlane.recall.bm25 import bm25_leg
from memlane.recall.hybrid import merge
from memlane.services.memory_service import MemoryService
from memlane.storage import fts
from memlane.storage import memories as mem_sql

ACTIONS = ("ADD", "UPDATE", "DELETE", "NONE")
DESTRUCTIVE = ("UPDATE", "DELETE")
TOP_K = 5
NO_CANDIDATES_REASON = "no similar memories exist; new information"


@dataclass(frozen=True, slots=True)
class Candidate:
    """An existing memory a fact is compared with; ``score`` is the merged hybrid score in [0, 1]."""

    id: str
    seq: int
    type: str
    content: str
    score: float


@dataclass(frozen=True, slots=True)
class Proposal:
    """What to do with one fact. ``target_id`` is set (and a candidate's) for UPDATE and DELETE;
    ``confidence`` is the decision's, in [0, 1]; ``candidate_ids`` the ids the model saw."""

    fact: Fact
    action: str
    target_id: str | None
    confidence: float
    reason: str
    candidate_ids: tuple[str, ...] = ()
    target_content: str | None = None


@dataclass(slots=True)
class DecisionResult:
    """All proposals of one memory's facts, and the warnings of dropped ones."""

    proposals: list[Proposal] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    llm_calls: int = 0


def find_candidates(
    memories: MemoryService,
    recall: RecallSettings,
    text: str,
    vector: np.ndarray | None,
    *,
    project: str | None = None,
    exclude_ids: Collection[str] = (),
    k: int = TOP_K,
) -> list[Candidate]:
    """The top ``k`` (5) hybrid candidates for ``text``, best first.

    Args:
        memories: the store (its database, FTS and in-memory index).
        recall: alpha, min_score and context_weight of the merge.
        vector: the fact's embedding, float32 [d], or None (BM25 leg only).
        project: search this project and global memories; None = every memory.
        exclude_ids: never returned (the memory the fact was extracted from).
    """
    filters = fts.Filters(project=project, include_global=project is not None, exclude_superseded=True)
    n = (k + len(exclude_ids)) * 4
    expr = fts.match_expression(text)
    bm25 = None
    if expr is not None:
        bm25 = dict(bm25_leg(memories.db, memories.index, expr, n, filters, recall.context_weight))
    vec = None
    index = memories.index
    if vector is not None and len(index) and vector.shape == (index.dimensions,):
        vec = dict(index.search(vector, n, filters, recall.context_weight))
        if bm25:
            vec.update(index.score_of(vector, [s for s in bm25 if s not in vec], recall.context_weight))
    merged = merge(vec, bm25, recall.alpha)
    ranked = sorted(
        ((sc, seq) for seq, (sc, _) in merged.items() if sc > 0 and sc >= recall.min_score),
        key=lambda t: (-t[0], -t[1]),
    )[: k + len(exclude_ids)]
    if not ranked:
        return []
    rows = memories.db.read(lambda c: mem_sql.live_briefs_by_seqs(c, [s for _, s in ranked]))
    out = []
    for sc, seq in ranked:
        brief = rows.get(seq)  # None: deleted or superseded since the index saw it
        if brief is None or brief[0] in exclude_ids:
            continue
        out.append(Candidate(brief[0], seq, brief[1], brief[2], float(sc)))
    return out[:k]


def parse_decision(raw: str, fact: Fact, candidates: Sequence[Candidate]) -> tuple[Proposal | None, str | None]:
    """Validate the decision reply for ``fact``: ``(proposal, None)`` or ``(None, warning)``. Never raises."""
    obj, problem = parse_json_reply(raw)
    if obj is None:
        return None, f"decision: {problem}"
    action = str(obj.get("action", "")).strip().upper()
    if action not in ACTIONS:
        return None, f"decision: unknown action {obj.get('action')!r}"
    reason = obj.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        return None, f"decision: empty reason for {action}"
    by_id = {c.id: c for c in candidates}
    target = obj.get("targetId", obj.get("target_id"))
    target = str(target).strip() if target not in (None, "") else None
    if action in DESTRUCTIVE:
        if target is None:
            return None, f"decision: {action} without targetId; dropped"
        if target not in by_id:
            return None, f"decision: {action} targetId {target!r:.80} is not a candidate (hallucinated); dropped"
    else:
        target = target if target in by_id else None
    try:
        conf = float(obj.get("confidence", fact.confidence))
    except (TypeError, ValueError):
        conf = fact.confidence
    conf = min(1.0, max(0.0, conf)) if conf == conf else fact.confidence
    return Proposal(
        fact, action, target, conf, reason.strip()[:500], tuple(by_id), by_id[target].content if target else None
    ), None


def run_shadow_decisions(
    llm: LlmProvider,
    memories: MemoryService,
    recall: RecallSettings,
    facts: Sequence[Fact],
    vectors: Mapping[str, np.ndarray],
    *,
    project: str | None = None,
    exclude_ids: Collection[str] = (),
    timeout_s: float | None = None,
) -> DecisionResult:
    """Propose an action for every fact (seed: runShadowDecisions). Writes nothing.

    Args:
        vectors: content_hash -> the fact's embedding (float32 [d]); a fact without one uses BM25 only.
        exclude_ids: memories never offered as candidates (the source memory).
        timeout_s: seconds per decision call.

    Raises:
        LlmTimeout / LlmError: a decision call failed (the job is retried); bad replies only warn.
    """
    out = DecisionResult()
    for fact in facts:
        h = normalize_and_hash(fact.content).content_hash
        cands = find_candidates(
            memories, recall, fact.content, vectors.get(h), project=project, exclude_ids=exclude_ids
        )
        if not cands:
            out.proposals.append(Proposal(fact, "ADD", None, fact.confidence, NO_CANDIDATES_REASON))
            continue
        raw = llm.generate(
            decision_prompt(fact.content, fact.type, fact.confidence, [(c.id, c.type, c.content) for c in cands]),
            timeout_s=timeout_s,
            schema=DECISION_SCHEMA,
        )
        out.llm_calls += 1
        proposal, warning = parse_decision(raw, fact, cands)
        if warning:
            out.warnings.append(f"{warning} (fact: {fact.content[:80]!r})")
        if proposal is not None:
            out.proposals.append(proposal)
    return out
