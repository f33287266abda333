"""``memlane bench retrieval --dataset locomo``: LoCoMo retrieval quality on the real store.

Protocol (issue "Core", "The main job on real input"): one fresh store per conversation;
every raw turn becomes a memory ``"{speaker}: {text}"`` (+ ``" [image: {caption}]"``) created
at its session date plus i seconds; dia_id and session go into metadata, never the text.
Each turn's ``context`` is the text of the ``context_turns`` turns before it in its session
(indexed by both recall legs, not part of the memory). Every question is recalled with
k = 50 and ``now`` one second after the last session; recall does not touch access counts.
Metrics: ``bench.metrics`` (LoCoMo recall accuracy R@k, recall_any/all, NDCG@10, at turn
and session level).

The run uses the shipped settings (``Settings()`` defaults; only ``--alpha`` and
``--context-weight`` override them) and reports which recall stages were on (``stages``).

The learned ranker (:mod:`memlane.ranker`): every question is recalled once with the heuristic
ranking, keeping the candidate pool the ranker reads (``RecallService.recall(pool_out=...)``);
the learned ranking is that pool reordered by a model's scores, exactly what recall does with
``ranker="learned"`` (a test holds the two equal). A model is never scored on a conversation it
was trained on: when the model in use was trained on a conversation under test (the shipped
model was trained on all ten), or with ``cv="conversation"``, each conversation is ranked by a
model trained on the other conversations only (leave-one-conversation-out).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import numpy as np

from benchmarks.metrics import aggregate, latency_summary, score_question
from memlane.config import Settings
from memlane.config.clock import to_iso
from memlane.embedding.base import Embedder
from memlane.ranker.locomo import Conversation, load_locomo, summary
from memlane.services.inputs import RecallQuery

#: Questions are recalled with this k (the protocol's R@50 needs 50).
RECALL_K = 50


@dataclass(frozen=True)
class RetrievalConfig:
    """Knobs of one benchmark run (defaults = the shipped defaults).

    ``ranker``: None = the shipped ``recall.ranker``; ``learned`` or ``heuristic``.
    ``cv``: ``conversation`` = leave-one-conversation-out for the learned ranker (implied when
    the model was trained on a conversation under test). ``ablate``: also cross-validate with
    each feature group left out.
    """

    context_turns: int = 2
    alpha: float | None = None
    context_weight: float | None = None
    use_vectors: bool = True
    max_conversations: int | None = None
    ranker: Literal["learned", "heuristic"] | None = None
    cv: str | None = None
    ablate: bool = False


def stages_of(settings: Settings) -> dict[str, Any]:
    """Which recall stages ``settings`` turn on, and their knobs (printed by the bench)."""
    r, p = settings.recall, settings.memory.pipeline_v2
    return {
        "alpha": r.alpha,
        "context_weight": r.context_weight,
        "rehearsal_weight": r.rehearsal_weight,
        "recency_weight": r.recency_weight,
        "graph_boost": {
            "on": p.graph.enabled and p.graph.boost_weight > 0,
            "weight": p.graph.boost_weight,
            "max_share": p.graph.boost_max_share,
        },
        "hints": p.hints.enabled,
        "dampening": {
            "gravity": p.dampening.gravity_enabled,
            "hub": p.dampening.hub_enabled,
            "resolution": p.dampening.resolution_enabled,
        },
        "embedding_reranker": p.reranker.enabled,
        "ranker": r.ranker,
    }


def describe_stages(stages: dict[str, Any]) -> str:
    """One line naming each stage on or off."""
    g, d = stages["graph_boost"], stages["dampening"]
    on = lambda b: "on" if b else "off"  # noqa: E731
    return (
        f"alpha {stages['alpha']}, context weight {stages['context_weight']}; "
        f"graph boost {on(g['on'])} (+{g['weight']}, entities in <= {g['max_share']:.0%} of memories); "
        f"hints {on(stages['hints'])}; dampening: gravity {on(d['gravity'])}, hub {on(d['hub'])}, "
        f"resolution {on(d['resolution'])}; embedding reranker {on(stages['embedding_reranker'])}; "
        f"rehearsal boost {stages['rehearsal_weight']} (no access is counted), recency boost "
        f"{stages['recency_weight']}; ranker {stages['ranker']}"
    )


def run(
    data: Path,
    *,
    embedder: Embedder | None,
    config: RetrievalConfig = RetrievalConfig(),
    workdir: Path | None = None,
    settings_overrides: dict[str, Any] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Run the benchmark; returns the JSON-able report (metrics, throughput, latency, config,
    stages, and for the learned ranker how it was evaluated).

    Args:
        data: path of locomo10.json.
        embedder: the shared embedder (None = BM25 only).
        config: the run's knobs.
        workdir: where the per-conversation stores go (default: a temporary directory); a
            complete store found there is reused (:mod:`memlane.ranker.stores`).
        settings_overrides: ``{"recall": {...}}`` applied to every store's recall settings.
        progress: ``progress(stage, done, total)`` callback.

    Raises:
        ValueError: the file is not LoCoMo-shaped, or an unknown ``ranker`` / ``cv``.
    """
    from memlane.ranker import features as F
    from memlane.ranker.stores import build_store, open_store
    from memlane.ranker.train import QuestionPool

    if config.ranker not in (None, "learned", "heuristic"):
        raise ValueError(f"unknown ranker {config.ranker!r} (learned, heuristic)")
    if config.cv not in (None, "conversation"):
        raise ValueError(f"unknown cross-validation {config.cv!r} (conversation)")
    convs = load_locomo(data)
    if config.max_conversations:
        convs = convs[: config.max_conversations]
    info = summary(convs)
    rows: list[dict[str, Any]] = []
    pools: list[QuestionPool] = []
    latencies: list[float] = []
    ingest_s, n_turns, dedup_turns, built = 0.0, 0, 0, 0
    tmp = tempfile.TemporaryDirectory(prefix="memlane-bench-") if workdir is None else None
    root = Path(tmp.name) if tmp else Path(workdir)  # type: ignore[arg-type]
    emb = embedder if config.use_vectors else None
    total_q = sum(len(c.questions) for c in convs)
    done_q = 0
    stages: dict[str, Any] | None = None
    ranker_state: dict[str, Any] = {}
    recall_over = dict(dict(settings_overrides or {}).get("recall", {}))
    if config.alpha is not None:
        recall_over["alpha"] = config.alpha
    if config.context_weight is not None:
        recall_over["context_weight"] = config.context_weight
    try:
        for conv in convs:
            t0 = time.perf_counter()
            store = build_store(conv, root, emb, context_turns=config.context_turns)
            items = len(conv.turns)
            n_turns += items
            dedup_turns += items - len(store.id_to_dia)
            if store.built:
                ingest_s += time.perf_counter() - t0
                built += items
            with open_store(store.home, emb) as c:
                for k, v in recall_over.items():
                    setattr(c.settings.recall, k, v)
                if config.ranker is not None:
                    c.settings.recall.ranker = config.ranker
                if stages is None:
                    stages = stages_of(c.settings)
                    ranker_state = _ranker_state(c, emb)
                if progress:
                    progress(f"ingested {conv.id}", done_q, total_q)
                now = to_iso(conv.last_timestamp + timedelta(seconds=1))
                cache = c.recall.ranker.cache
                for q in conv.questions:
                    t1 = time.perf_counter()
                    captured: list[Any] = []
                    res = c.recall.recall(
                        RecallQuery(query=q.question, limit=RECALL_K, now=now, touch=False, ranker="heuristic"),
                        pool_out=captured,
                    )
                    latencies.append((time.perf_counter() - t1) * 1000)
                    ranked = [store.id_to_dia[h.memory.id] for h in res.hits]
                    rows.append(
                        score_question(ranked, q.evidence, q.category, conversation=conv.id, question_index=q.index)
                    )
                    pool = captured[0] if captured else None
                    dia = [store.seq_to_dia[s] for s in pool.seqs] if pool is not None else []
                    x = (
                        F.compute(q.question, pool, cache)
                        if pool is not None
                        else np.zeros((0, len(F.FEATURES)), np.float32)
                    )
                    pools.append(
                        QuestionPool(conv.id, q.index, q.category, q.question, q.evidence, dia, x, ranked, pool)
                    )
                    done_q += 1
                    if progress:
                        progress(conv.id, done_q, total_q)
    finally:
        if tmp:
            tmp.cleanup()
    report: dict[str, Any] = {
        "dataset": "locomo",
        "data": str(data),
        "config": {
            "context_turns": config.context_turns,
            "alpha": config.alpha,
            "context_weight": config.context_weight,
            "use_vectors": config.use_vectors,
            "embedding_model": emb.model_id if emb else None,
            "k": RECALL_K,
            "ranker": config.ranker,
            "cv": config.cv,
        },
        "stages": stages,
        "summary": info,
        "dropped_evidence_ids": info.get("dropped_evidence"),
        "deduplicated_turns": dedup_turns,
        "metrics": aggregate(rows),
        "heuristic_metrics": None,
        "ranker": {"used": "heuristic", **ranker_state},
        "ingest": {
            "memories": built,
            "seconds": ingest_s,
            "memories_per_s": built / ingest_s if ingest_s else None,
            "reused_memories": n_turns - built,
        },
        "recall_latency_ms": latency_summary(latencies),
        "per_question": rows,
    }
    if stages is not None and (stages["ranker"] == "learned" or config.cv == "conversation"):
        _learned(report, pools, convs, config, progress)
    return report


def _ranker_state(c: Any, emb: Embedder | None) -> dict[str, Any]:
    """The learned ranker as this store sees it: the model file, its header, why it is off."""
    r = c.recall.ranker
    model, why = r.model()
    reason = r.reason_off("learned", c.recall.index.model_id, emb is not None)
    return {
        "model_path": str(r.path()),
        "header": {k: v for k, v in (model.header if model else {}).items() if k != "params"},
        "available": reason is None,
        "unavailable_because": reason or why,
    }


def _learned(
    report: dict[str, Any],
    pools: list,
    convs: list[Conversation],
    config: RetrievalConfig,
    progress: Callable[[str, int, int], None] | None,
) -> None:
    """Fill ``report`` with the learned ranking's metrics (the heuristic's kept beside them)."""
    from memlane.ranker.model import load_cached
    from memlane.ranker.train import cross_validate, rerank

    state = report["ranker"]
    if not state["available"] and config.cv != "conversation":
        state["note"] = f"learned ranker unavailable ({state['unavailable_because']}): heuristic ranking"
        return
    ids = [c.id for c in convs]
    trained_on = set(state["header"].get("trained_on") or [])
    overlap = sorted(trained_on & set(ids))
    heuristic = report["metrics"]
    if state["available"]:
        state["rerank_latency_ms"] = rerank_latency(pools, load_cached(Path(state["model_path"])))
    if (config.cv == "conversation" or overlap) and len(ids) < 2:
        state["note"] = (
            "learned ranker not evaluated: "
            + ("the model was trained on " + ", ".join(overlap) if overlap else "cross-validation was asked for")
            + " and leave-one-conversation-out "
            "needs two or more conversations; heuristic ranking"
        )
        return
    if config.cv == "conversation" or overlap:
        rankings, folds = cross_validate(pools, progress=progress)
        for f in folds:  # never evaluated on its training data
            assert f.test not in f.train
        state["evaluation"] = "leave-one-conversation-out"
        state["folds"] = [{"test": f.test, "train": f.train} for f in folds]
        state["note"] = (
            "the shipped model was trained on " + ", ".join(overlap) + "; " if overlap else ""
        ) + "each conversation is ranked by a model trained on the other conversations only"
    else:
        model = load_cached(Path(state["model_path"]))
        rankings = {
            (p.conversation, p.index): rerank(p, model.predict(p.x) if len(p.dia_ids) else np.zeros(0)) for p in pools
        }
        state["evaluation"] = "model as configured (trained on none of these conversations)"
    rows = [
        score_question(
            rankings[(p.conversation, p.index)],
            p.evidence,
            p.category,
            conversation=p.conversation,
            question_index=p.index,
        )
        for p in pools
    ]
    report["heuristic_metrics"] = heuristic
    report["heuristic_per_question"] = report["per_question"]
    report["metrics"] = aggregate(rows)
    report["per_question"] = rows
    state["used"] = "learned"
    if config.ablate:
        report["ablation"] = ablation(pools, progress)


def rerank_latency(pools: list, model: Any) -> dict[str, Any]:
    """In-process cost of the learned stage per question: features of its pool (up to 100
    candidates) and the model's prediction, ms. ``cold``: a fresh text cache (each memory's
    text tokenised on first sight); ``warm``: the same pools again (as a daemon's later recalls)."""
    from memlane.ranker import features as F

    cache = F.TextCache()
    out: dict[str, Any] = {}
    try:
        for name in ("cold", "warm"):
            times = []
            for p in pools:
                if p.pool is None:
                    continue
                t0 = time.perf_counter()
                model.predict(F.compute(p.question, p.pool, cache))
                times.append((time.perf_counter() - t0) * 1000)
            out[name] = latency_summary(times)
    finally:
        cache.close()
    out["candidates_p50"] = float(np.median([len(p.dia_ids) for p in pools])) if pools else 0.0
    return out


def ablation(pools: list, progress: Callable[[str, int, int], None] | None = None) -> dict[str, Any]:
    """Leave-one-conversation-out with each feature group left out (its columns NaN for
    training and scoring): group -> {"overall": {R@5, R@10, NDCG@10}, "by_category": {...}}."""
    from memlane.ranker import features as F
    from memlane.ranker.train import cross_validate

    out: dict[str, Any] = {}
    for g in F.GROUPS:
        keep = [i for i, name in enumerate(F.FEATURES) if F.FEATURE_GROUPS[name] != g]
        rankings, _ = cross_validate(pools, columns=keep)
        rows = [
            score_question(
                rankings[(p.conversation, p.index)],
                p.evidence,
                p.category,
                conversation=p.conversation,
                question_index=p.index,
            )
            for p in pools
        ]
        agg = aggregate(rows)
        pick = lambda grp: {m: grp["turn"][m] for m in ("R@5", "R@10", "NDCG@10")}  # noqa: E731
        out[g] = {
            "overall": pick(agg["overall"]),
            "by_category": {str(k): pick(v) for k, v in agg["by_category"].items()},
        }
        if progress:
            progress(f"ablation without {g}", len(out), len(F.GROUPS))
    return out
