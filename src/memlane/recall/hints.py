"""Prospective hints: generation by the LLM in a job worker, and their merge into recall.

memory-pipeline-v2.md "Prospective Indexing (Hints)". After a memory is written a
``prospective_index`` job is queued (:func:`hints_hook`, in the remember transaction, while
``pipeline_v2.hints.enabled``); the ``hints`` worker asks the extraction LLM for up to
``hints.max`` hypothetical future queries the memory would answer (:func:`generate_hints`) and
stores them in ``memory_hints`` (+ its FTS5 index). At recall the hint index is searched with
the content leg's FTS expression (:func:`search_hints`) and merged with :func:`merge_hints`:
a memory's BM25 leg becomes ``max(content bm25, hint bm25)`` - the stronger signal wins, a
memory matched by both is not double-boosted - and its fused score is recomputed with the
hybrid rule of :mod:`memlane.recall.hybrid`.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable
from typing import Any

from memlane.config.clock import now_iso
from memlane.config.pipeline import PipelineV2Settings
from memlane.providers import LlmError, LlmProvider, extract_json_object, strip_fences, strip_think
from memlane.recall.fts_cache import FtsCache
from memlane.recall.hybrid import LegScores
from memlane.recall.memory_index import MemoryIndex
from memlane.storage import hints as hints_sql
from memlane.storage import jobs as jobs_sql
from memlane.storage import memories as mem_sql
from memlane.storage.db import Database
from memlane.storage.fts import Filters, normalise
from memlane.storage.fts_stats import HINTS
from memlane.storage.jobs import Job
from memlane.storage.models import NewMemory
from memlane.workers.runtime import SkipJob

log = logging.getLogger(__name__)

#: Job type of hint generation (the seed's name).
PROSPECTIVE_INDEX = "prospective_index"
#: Longest hint kept, chars (longer ones are cut at a word boundary).
MAX_HINT_CHARS = 300
#: Memory content sent to the LLM, chars.
MAX_PROMPT_CONTENT_CHARS = 4000
#: Hint rows read per recall, per candidate wanted (a memory has up to 20 hints).
HINT_FETCH_FACTOR = 3

PROMPT = """You index a memory store for an AI coding agent. Given the memory below, write up to \
{n} short questions or search queries a user might ask in the future that this memory would help \
answer. Use different wording from the memory where natural. Reply with JSON only, no prose:
{{"hints": ["...", "..."]}}

Memory:
{content}
"""


class HintReplyError(LlmError):
    """The LLM's reply holds no usable hint list (not JSON, or ``hints`` not a list)."""


# ------------------------------------------------------------------------------ generation
def parse_hints(reply: str, max_hints: int) -> list[str]:
    """The hint strings of an LLM reply, cleaned: ``<think>`` blocks and fences stripped; a JSON
    object with a ``hints`` list or a bare JSON list accepted; non-strings dropped; whitespace
    collapsed; empty and case-insensitive duplicates dropped; each cut to MAX_HINT_CHARS;
    at most ``max_hints``. An empty list is a valid answer.

    Raises:
        HintReplyError: the reply holds neither form.
    """
    text = strip_fences(strip_think(reply))
    items: Any = None
    try:
        parsed = json.loads(text)
        items = parsed.get("hints") if isinstance(parsed, dict) else parsed
    except ValueError:
        obj = extract_json_object(text)
        items = obj.get("hints") if obj is not None else None
    if not isinstance(items, list):
        raise HintReplyError(f"hint reply is not a JSON hint list: {text[:200]!r}")
    out: list[str] = []
    seen: set[str] = set()
    for h in items:
        if not isinstance(h, str):
            continue
        h = " ".join(h.split())
        if len(h) > MAX_HINT_CHARS:
            h = h[:MAX_HINT_CHARS].rsplit(" ", 1)[0]
        if h and h.lower() not in seen:
            seen.add(h.lower())
            out.append(h)
        if len(out) >= max_hints:
            break
    return out


def generate_hints(llm: LlmProvider, content: str, *, max_hints: int, timeout_ms: float) -> list[str]:
    """Ask ``llm`` for up to ``max_hints`` hints for ``content`` within ``timeout_ms`` (ms).

    Raises:
        LlmError: the call failed or timed out; HintReplyError: an unusable reply.
    """
    prompt = PROMPT.format(n=max_hints, content=content[:MAX_PROMPT_CONTENT_CHARS])
    schema = {
        "type": "object",
        "required": ["hints"],
        "properties": {"hints": {"type": "array", "items": {"type": "string"}, "maxItems": max_hints}},
    }
    return parse_hints(llm.generate(prompt, timeout_s=timeout_ms / 1000.0, schema=schema), max_hints)


def hint_handler(
    db: Database, llm: Callable[[], LlmProvider | None], pipeline: Callable[[], PipelineV2Settings]
) -> Callable[[Job], dict[str, Any]]:
    """The ``prospective_index`` job handler: generate and store one memory's hints.

    Skips (``SkipJob``) when no LLM is configured, the memory is gone or deleted. LLM errors and
    unusable replies raise (a failed attempt: retried with backoff, dead after max attempts).
    The LLM call runs outside any transaction; the write is one ``db.write``.
    """

    def handle(job: Job) -> dict[str, Any]:
        provider = llm()
        if provider is None:
            raise SkipJob("no LLM configured")
        if job.memory_id is None:
            raise SkipJob("job has no memory_id")
        memory_id = job.memory_id
        memory = db.read(lambda c: mem_sql.get(c, memory_id))
        if memory is None or memory.is_deleted:
            raise SkipJob("memory missing or deleted")
        cfg = pipeline().hints
        hints = generate_hints(provider, memory.content, max_hints=cfg.max, timeout_ms=cfg.timeout)
        n = db.write(lambda c: hints_sql.replace(c, memory.id, hints, at=now_iso()))
        return {"hints": n}

    return handle


def hints_hook(pipeline: Callable[[], PipelineV2Settings]) -> Callable[[sqlite3.Connection, NewMemory, str], None]:
    """A ``MemoryService.created_hooks`` entry: queue a ``prospective_index`` job for each
    created memory while ``pipeline().enabled`` and ``hints.enabled`` (SQL only; deduplicated by
    memory id while pending or leased)."""

    def hook(conn: sqlite3.Connection, new: NewMemory, at: str) -> None:
        p = pipeline()
        if p.enabled and p.hints.enabled:
            jobs_sql.enqueue(
                conn, PROSPECTIVE_INDEX, at=at, dedup_key=new.id, memory_id=new.id, max_attempts=p.worker.max_retries
            )

    return hook


# ------------------------------------------------------------------------------ recall
def search_hints(
    db: Database, index: MemoryIndex, expr: str, n_cand: int, filters: Filters, cache: FtsCache | None = None
) -> dict[int, float]:
    """The hint leg: ``seq -> normalised hint BM25 in [0, 1]`` (best hint match 1.0) of at most
    ``n_cand`` memories passing ``filters``; ``expr`` is the content leg's FTS expression.

    ``cache``: in-memory FTS5 statistics (:mod:`memlane.recall.fts_cache`), used while its
    snapshot is current (the same result without SQL).

    Raises:
        StorageError: SQLite failed.
    """
    if cache is not None:
        fast = cached_search_hints(cache, index, expr, n_cand, filters)
        if fast is not None:
            return fast
    raw = db.read(lambda c: hints_sql.search_raw(c, expr, limit=n_cand * HINT_FETCH_FACTOR))
    if not raw:
        return {}
    keep = index.allowed([s for s, _ in raw], filters)
    rows = [r for r, k in zip(raw, keep) if k][:n_cand]
    return dict(normalise(rows))


def cached_search_hints(
    cache: FtsCache, index: MemoryIndex, expr: str, n_cand: int, filters: Filters
) -> dict[int, float] | None:
    """:func:`search_hints` from ``cache``'s snapshot (None when it cannot answer): the best
    ``3 n_cand`` hint rows, each memory's best of them (hints of a missing memory dropped), best
    first (ties by seq), filtered by the index, the first ``n_cand``, normalised."""
    snap = cache.current()
    if snap is None:
        return None
    terms = cache.terms(expr, HINTS.name)
    if terms is None:
        return None
    table = snap[HINTS.name]
    hit, bm = table.scores(terms, ())
    top, tb = table.top(hit, bm, n_cand * HINT_FETCH_FACTOR)
    best: dict[int, float] = {}
    for seq, v in zip(table.extra[top].tolist(), tb.tolist()):  # best first: the first is the min
        if seq >= 0 and seq not in best:
            best[seq] = v
    if not best:
        return {}
    raw = sorted(best.items(), key=lambda kv: (kv[1], kv[0]))
    keep = index.allowed([s for s, _ in raw], filters)
    return dict(normalise([r for r, k in zip(raw, keep.tolist()) if k][:n_cand]))


def merge_hints(
    merged: dict[int, tuple[float, LegScores]],
    hint_scores: dict[int, float],
    alpha: float,
    vector_of: Callable[[list[int]], dict[int, float]] | None,
) -> dict[int, tuple[float, LegScores]]:
    """Merge the hint leg into hybrid-merged results with max (seed: ``Math.max``).

    For each memory with a hint score ``h``: its BM25 leg becomes ``b' = max(b, h)`` (``b`` = 0
    when the content leg did not return it) and its score is recomputed:
    ``alpha * v + (1 - alpha) * b'`` when the vector leg ran, else ``b'``. Memories only a hint
    matched are added, with their true vector score from ``vector_of`` (None: the vector leg did
    not run). A hint never lowers a score, and content + hint never add up.

    Args:
        merged: seq -> (score, LegScores) from :func:`memlane.recall.hybrid.merge`.
        hint_scores: seq -> normalised hint BM25 in [0, 1].
        alpha: vector weight in [0, 1].
        vector_of: seqs -> their vector scores, or None when the vector leg did not run.
    Returns:
        a new dict; ``merged`` is not modified.
    """
    if not hint_scores:
        return merged
    out = dict(merged)
    missing = [s for s in hint_scores if s not in merged]
    vec = vector_of(missing) if vector_of is not None and missing else {}
    for s, h in hint_scores.items():
        if s in merged:
            legs = merged[s][1]
            v, b = legs.vector, legs.bm25 or 0.0
        else:
            v, b = (vec.get(s, 0.0) if vector_of is not None else None), 0.0
        b2 = max(b, float(h))
        score = b2 if v is None else alpha * v + (1.0 - alpha) * b2
        out[s] = (float(score), LegScores(v, b2))
    return out
