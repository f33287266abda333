"""``memlane bench predictor-offline``: what could a linear ranker over the logged features do on LoCoMo?

Reads the stores a LoCoMo first pass left (``memlane bench predictor --dataset locomo
--workdir W``; its ``first-pass.json`` names them) and, without running the daemon again,
trains a listwise linear model on the logged features of each question's session and scores
the held-out questions with the bench's own metric (binary NDCG@10 over the session's pool,
ideal over all evidence; :mod:`benchmarks.predictor_locomo`). It answers two questions the
end-to-end bench cannot separate:

* what the feature schema can carry at all (a ceiling for the engine's linear stage, which is
  the same model trained on raw, unstandardised features; docs/predictor.md, "Linear stage");
* which features transfer from the questions the model learns from to the held-out ones: each
  variant is trained with every feature and again without ``log_age_days``;
* how much of the model's gain a fused ranking keeps: RRF of the baseline's and the model's
  orders at fixed alphas (the baseline's weight), as the daemon fuses them.

Two options change the setting rather than the model:

* ``dating="answerable"``: each question's session is dated when it could first have been
  asked, at the start of the LoCoMo session that follows its last evidence turn (a day after
  the last turn for the last ones), instead of after the whole conversation as the bench dates
  it. Its pool keeps only what was stored by then, and every age and time feature is recomputed
  from that date.
* ``recency=(weight, half_life_days)``: the baseline is the hybrid recall with its own recency
  boost (:func:`memlane.recall.hybrid.boost`, off by default in the daemon) applied to the
  logged baseline scores; the baseline's order, and the score and rank columns the model's
  prior reads, follow the boosted score.

Training sets: ``own`` = the conversation's own learning sessions (what the first pass learns
from), ``others`` = the learning sessions of the other nine conversations (Phase 6's data).
Labels are the ones the bench's sessions stored (evidence in the pool 1.0, injected
non-evidence 0.0), i.e. what the engine trains on.

The model (:func:`fit_listwise_linear`): score = prior + z(x) . w, with the engine's baseline
prior ``1.0 * baseline_score + 0.4 * baseline_rank_inv`` (``model.BASELINE_PRIOR``), features
standardised over the training candidates, ``w`` learned by full-batch Adam on the ListNet
loss (Cao et al. 2007, "Learning to Rank: From Pairwise Approach to Listwise Approach"): the
cross-entropy between softmax(labels * label_scale / T) and softmax(scores / T), T = 0.5,
label_scale = 5 as the engine (``settings.LABEL_SCALE``).
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bootstrap import paired_bootstrap
from benchmarks.predictor_locomo import ndcg_binary, ordered_questions
from memlane.config import predictor as C
from memlane.config.predictor import PredictorSettings
from memlane.predictor import policy
from memlane.predictor.dataset import build_session, derived_signals, with_query_coverage
from memlane.predictor.features import FEATURE_INDEX, FEATURE_NAMES
from memlane.predictor.model import BASELINE_PRIOR
from memlane.ranker.locomo import Conversation, load_locomo
from memlane.recall.hybrid import boost
from memlane.storage import predictor as pred_sql

__all__ = [
    "DATINGS",
    "LinearRanker",
    "OfflineSession",
    "VARIANTS",
    "apply_recency",
    "fit_listwise_linear",
    "load_conversation",
    "load_first_pass",
    "run",
]

#: ``asked``: as the bench dates the sessions (after the whole conversation); ``answerable``:
#: when the question could first be asked (see the module docstring).
DATINGS = ("asked", "answerable")

Progress = Callable[[str, int, int], None]

#: name -> (training set, features left out)
VARIANTS: dict[str, tuple[str, tuple[str, ...]]] = {
    "own": ("own", ()),
    "own_without_age": ("own", ("log_age_days",)),
    "others": ("others", ()),
    "others_without_age": ("others", ("log_age_days",)),
}


@dataclass
class OfflineSession:
    """One question's session as the first pass logged it.

    Attributes:
        key: the session key (``<conversation>-q<index>``).
        held_out: True for the last 40 % of the questions (by last evidence turn).
        ids: the pool's memory ids in the baseline's order.
        features: float64 ``[n, NUM_FEATURES]``, the engine's feature matrix (same builder).
        labels: float64 ``[n]`` stored labels (learning sessions), or None (held out).
        evidence: memory ids of the question's evidence turns (in the pool or not).
    """

    key: str
    held_out: bool
    ids: list[str]
    features: np.ndarray
    labels: np.ndarray | None
    evidence: set[str] = field(default_factory=set)


@dataclass
class LinearRanker:
    """A fitted listwise linear model (see the module docstring).

    Attributes:
        columns: indices of the feature columns used (``[F']`` of ``NUM_FEATURES``).
        mean, sd: standardisation of those columns over the training candidates, ``[F']``.
        weights: learned weights ``[F']`` on the standardised columns.
    """

    columns: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    weights: np.ndarray

    def score(self, features: np.ndarray) -> np.ndarray:
        """Scores ``[n]`` of a ``[n, NUM_FEATURES]`` matrix (higher ranks first)."""
        z = (features[:, self.columns] - self.mean) / self.sd
        return _prior(features) + z @ self.weights

    def named_weights(self) -> dict[str, float]:
        """``{feature name: weight}`` (on the standardised scale)."""
        return {FEATURE_NAMES[int(c)]: float(w) for c, w in zip(self.columns, self.weights)}


def _prior(features: np.ndarray) -> np.ndarray:
    out = np.zeros(features.shape[0], dtype=np.float64)
    for name, w in BASELINE_PRIOR.items():
        out += w * features[:, FEATURE_INDEX[name]]
    return out


def fit_listwise_linear(
    sessions: Sequence[tuple[np.ndarray, np.ndarray]],
    *,
    leave_out: Sequence[str] = (),
    steps: int = 200,
    lr: float = 1e-2,
    temperature: float = 0.5,
    label_scale: float = C.LABEL_SCALE,
) -> LinearRanker:
    """Fit :class:`LinearRanker` weights by full-batch Adam on the ListNet loss.

    Args:
        sessions: ``(features [n_i, NUM_FEATURES], labels [n_i])`` pairs; sessions whose labels
            do not vary carry no ranking signal and are skipped.
        leave_out: feature names the model does not use.
        steps: Adam steps (one per pass over all sessions).
        lr: Adam learning rate.
        temperature: T of both softmaxes.
        label_scale: labels are multiplied by this before the target softmax.

    Returns:
        the fitted ranker (weights 0 when no session has varying labels).

    Raises:
        KeyError: an unknown name in ``leave_out``.
    """
    drop = {FEATURE_INDEX[name] for name in leave_out}
    columns = np.array([i for i in range(len(FEATURE_NAMES)) if i not in drop])
    keep = [(x, y) for x, y in sessions if len(y) > 1 and float(np.ptp(y)) > 1e-6]
    if not keep:
        return LinearRanker(columns, np.zeros(len(columns)), np.ones(len(columns)), np.zeros(len(columns)))
    stacked = np.concatenate([x[:, columns] for x, _ in keep])
    mean, sd = stacked.mean(0), stacked.std(0) + 1e-6
    n_max, f = max(len(y) for _, y in keep), len(columns)
    z = np.zeros((len(keep), n_max, f))
    prior = np.zeros((len(keep), n_max))
    mask = np.zeros((len(keep), n_max), dtype=bool)
    target = np.zeros((len(keep), n_max))
    for i, (x, y) in enumerate(keep):
        n = len(y)
        z[i, :n] = (x[:, columns] - mean) / sd
        prior[i, :n] = _prior(x)
        mask[i, :n] = True
        t = y * label_scale / temperature
        e = np.exp(t - t.max())
        target[i, :n] = e / e.sum()
    w, m, v = np.zeros(f), np.zeros(f), np.zeros(f)
    for step in range(1, steps + 1):
        s = np.where(mask, (np.einsum("snf,f->sn", z, w) + prior) / temperature, -np.inf)
        p = np.exp(s - s.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        grad = np.einsum("snf,sn->f", z, p - target) / temperature / len(keep)
        m = 0.9 * m + 0.1 * grad
        v = 0.999 * v + 0.001 * grad * grad
        w -= lr * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
    return LinearRanker(columns, mean, sd, w)


def store_embedding_model(conn: sqlite3.Connection) -> tuple[str | None, int]:
    """The embedding model most of a store's vectors come from, and its width E: ``(model id,
    E)``, or ``(None, 0)`` when the store holds no vector."""
    row = conn.execute(
        "SELECT model, dimensions FROM embeddings GROUP BY model ORDER BY count(*) DESC LIMIT 1"
    ).fetchone()
    return (row[0], int(row[1])) if row else (None, 0)


def _created(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def apply_recency(
    features: np.ndarray, ids: list[str], weight: float, half_life_days: float
) -> tuple[np.ndarray, list[str]]:
    """Re-rank a pool by the recall's recency boost (:func:`memlane.recall.hybrid.boost`) over
    its logged baseline scores.

    Args:
        features: ``[n, NUM_FEATURES]`` in the baseline's order (age from ``log_age_days``).
        ids: the ``n`` memory ids in that order.
        weight: recency weight (dimensionless); half_life_days: its half-life (days).

    Returns:
        the matrix ``[n, NUM_FEATURES]`` and ids in the boosted order, with the
        ``baseline_score`` column boosted and ``baseline_rank_inv`` recomputed (``1 / (1 + rank)``).
    """
    bs, br = FEATURE_INDEX["baseline_score"], FEATURE_INDEX["baseline_rank_inv"]
    age = np.expm1(features[:, FEATURE_INDEX["log_age_days"]])
    boosted = boost(
        features[:, bs],
        access_count=0,
        age_days=age,
        rehearsal_weight=0.0,
        recency_weight=weight,
        recency_half_life_days=half_life_days,
    )
    order = np.argsort(-boosted, kind="stable")
    out = features[order].copy()
    out[:, bs] = boosted[order]
    out[:, br] = 1.0 / (1.0 + np.arange(len(order)))
    return out, [ids[j] for j in order]


def load_conversation(
    conv: Conversation,
    home: Path,
    *,
    train_share: float = 0.6,
    dating: str = "asked",
    recency: tuple[float, float] | None = None,
) -> list[OfflineSession]:
    """The question sessions a first pass stored in ``home`` (read only), in question order.

    Features are rebuilt from the logged raw signals with the engine's own builder
    (:func:`memlane.predictor.dataset.build_session`, derived signals included).

    Args:
        conv: the conversation.
        home: its first-pass home (``memories.db`` inside).
        train_share: share of the questions learned from (the first ones).
        dating: one of :data:`DATINGS` (module docstring).
        recency: ``(weight, half_life_days)`` of the recency-boosted baseline, or None.

    Raises:
        FileNotFoundError: ``home/memories.db`` does not exist.
        ValueError: an unknown ``dating``, or a recency half-life <= 0.
    """
    if dating not in DATINGS:
        raise ValueError(f"dating must be one of {DATINGS}, got {dating!r}")
    if recency is not None and recency[1] <= 0:
        raise ValueError(f"recency half-life must be > 0 days, got {recency[1]}")
    db = home / "memories.db"
    if not db.exists():
        raise FileNotFoundError(f"no store at {db}: run the LoCoMo first pass with this --workdir first")
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        model, dim = store_embedding_model(conn)
        mem_of: dict[str, str] = {}
        created: dict[str, datetime] = {}
        session_starts: dict[str, datetime] = {}  # LoCoMo session ("D3") -> its first turn's time
        for mid, source, at in conn.execute("SELECT id, source_id, created_at FROM memories ORDER BY seq"):
            dia = str(source).split(":", 1)[1]
            mem_of.setdefault(dia, mid)
            created[mid] = _created(at)
            part = dia.split(":", 1)[0]
            session_starts[part] = min(session_starts.get(part, created[mid]), created[mid])
        starts = sorted(session_starts.values())
        questions = ordered_questions(conv)
        n_train = int(math.ceil(train_share * len(questions)))
        out = []
        for i, q in enumerate(questions):
            key = f"{conv.id}-q{q.index}"
            row = conn.execute(
                "SELECT project, signals, started_at, context FROM sessions WHERE session_key = ?", (key,)
            ).fetchone()
            if row is None or not row[1]:
                continue
            signals = json.loads(row[1])
            when = datetime.fromisoformat(str(signals.get("session_time") or row[2]).replace("Z", "+00:00"))
            cands = pred_sql.session_candidates(conn, key, model)
            ranks = dict(
                conn.execute(
                    "SELECT memory_id, baseline_rank FROM session_memories WHERE session_key = ?", (key,)
                ).fetchall()
            )
            cands = sorted((r for r in cands if r.features is not None), key=lambda r: ranks.get(r.memory_id) or 0)
            evidence = {mem_of[e] for e in q.evidence if e in mem_of}
            raw = with_query_coverage([r.features or {} for r in cands], row[3] or "", [r.content for r in cands])
            if dating == "answerable" and evidence:
                last = max(created[m] for m in evidence)
                when = next((t for t in starts if t > last), last + timedelta(days=1))
                keep = [j for j, r in enumerate(cands) if created[r.memory_id] <= when]
                cands, raw = [cands[j] for j in keep], [raw[j] for j in keep]
                for r, sig in zip(cands, raw):
                    sig["age_days"] = max(0.0, (when - created[r.memory_id]).total_seconds() / 86400.0)
            if len(cands) < 2:
                continue
            ids = [r.memory_id for r in cands]
            derived = derived_signals(conn, ids, project=row[0], session_time=when)
            vectors = [np.frombuffer(r.vector, dtype="<f4") if r.vector is not None else None for r in cands]
            session = build_session(
                candidates=[{**sig, **derived[r.memory_id]} for r, sig in zip(cands, raw)],
                session_time=when,
                session_gap_hours=float(signals.get("session_gap_hours", 0.0)),
                candidate_vectors=vectors,
                candidate_texts=[r.content for r in cands],
                context_vector=None,
                context_text="",
                project=row[0],
                native_dim=dim or 1,
            )
            held = i >= n_train
            features = session.features.astype(np.float64)
            label_of = {r.memory_id: float(r.label or 0.0) for r in cands}
            if recency is not None:
                features, ids = apply_recency(features, ids, *recency)
            labels = None if held else np.array([label_of[m] for m in ids])
            out.append(OfflineSession(key, held, ids, features, labels, evidence))
        return out
    finally:
        conn.close()


#: alphas (the baseline's weight) at which the model's ranking is fused with the baseline's
FUSION_ALPHAS = (0.8, 0.6, 0.5, 0.4, 0.3)


def _evaluate(
    ranker: LinearRanker, held: Sequence[OfflineSession], rrf_k: float
) -> tuple[list[float], list[float], dict[float, list[float]]]:
    """Per held-out session: baseline NDCG@10, the model's, and the RRF fusion's at each alpha."""
    base, pred = [], []
    fused: dict[float, list[float]] = {a: [] for a in FUSION_ALPHAS}
    for s in held:
        order = [s.ids[j] for j in np.argsort(-ranker.score(s.features), kind="stable")]
        base.append(ndcg_binary(s.ids, s.evidence, len(s.evidence)))
        pred.append(ndcg_binary(order, s.evidence, len(s.evidence)))
        for a in FUSION_ALPHAS:
            scores = policy.rrf_fuse(s.ids, order, a, rrf_k)
            fused[a].append(ndcg_binary(sorted(s.ids, key=lambda m: -scores[m]), s.evidence, len(s.evidence)))
    return base, pred, fused


def load_first_pass(
    workdir: Path,
    data: Path,
    *,
    dating: str = "asked",
    recency: tuple[float, float] | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, list[OfflineSession]], float]:
    """Every conversation's question sessions from the stores a first pass left in ``workdir``.

    ``dating`` and ``recency`` as for :func:`load_conversation`.

    Returns:
        ``({conversation id: sessions in question order}, the first pass's train share)``.

    Raises:
        FileNotFoundError: no ``first-pass.json`` in ``workdir``, or a store it names is gone.
        ValueError: those stores hold no held-out question session.
    """
    saved = workdir / "first-pass.json"
    if not saved.exists():
        raise FileNotFoundError(
            f"no {saved}: run `memlane bench predictor --dataset locomo --workdir {workdir}` "
            "first (its first pass leaves the stores this reads)"
        )
    first = json.loads(saved.read_text())
    homes = {r["conversation"]: Path(r["home"]) for r in first["results"]}
    share = float(first.get("key", {}).get("config", {}).get("train_share", 0.6))
    convs = [c for c in load_locomo(data) if c.id in homes]
    sessions: dict[str, list[OfflineSession]] = {}
    for i, conv in enumerate(convs):
        sessions[conv.id] = load_conversation(conv, homes[conv.id], train_share=share, dating=dating, recency=recency)
        if progress:
            progress("load stores", i + 1, len(convs))
    if not any(s.held_out for v in sessions.values() for s in v):
        raise ValueError(f"the stores named in {saved} hold no held-out question session to score")
    return sessions, share


def run(
    workdir: Path,
    data: Path,
    *,
    seed: int = 0,
    dating: str = "asked",
    recency: tuple[float, float] | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Every variant of :data:`VARIANTS` on every conversation of the first pass in ``workdir``.

    ``dating`` and ``recency`` as for :func:`load_conversation`.

    Returns:
        ``{"variants": {name: {"overall": paired bootstrap of predictor vs baseline NDCG@10,
        "per_conversation": {id: {"n", "baseline", "model", "diff"}}, "worst": float,
        "mean_weights": {feature: weight}, "fused_minus_baseline_by_alpha": {alpha: mean NDCG@10
        difference of RRF(baseline, model) at that alpha (policy.rrf_fuse, the daemon's k)}}},
        "held_out_questions": int, ...}``.

    Raises:
        FileNotFoundError: no ``first-pass.json`` in ``workdir``, or a store it names is gone.
        ValueError: those stores hold no held-out question session.
    """
    sessions, share = load_first_pass(workdir, data, dating=dating, recency=recency, progress=progress)
    convs = list(sessions)
    report: dict[str, Any] = {
        "workdir": str(workdir),
        "train_share": share,
        "dating": dating,
        "recency": list(recency) if recency else None,
        "variants": {},
        "held_out_questions": sum(s.held_out for v in sessions.values() for s in v),
    }
    rrf_k = PredictorSettings().rrf_k  # the daemon's default RRF constant
    steps = len(VARIANTS) * len(convs)
    done = 0
    for name, (source, leave_out) in VARIANTS.items():
        all_base, all_pred, per, weights = [], [], {}, []
        all_fused: dict[float, list[float]] = {a: [] for a in FUSION_ALPHAS}
        for cid, own in sessions.items():
            if source == "own":
                train = [(s.features, s.labels) for s in own if s.labels is not None]
            else:
                train = [
                    (s.features, s.labels) for o, v in sessions.items() if o != cid for s in v if s.labels is not None
                ]
            ranker = fit_listwise_linear(train, leave_out=leave_out)
            weights.append(ranker.named_weights())
            base, pred, fused = _evaluate(ranker, [s for s in own if s.held_out], rrf_k)
            all_base += base
            all_pred += pred
            for a in FUSION_ALPHAS:
                all_fused[a] += fused[a]
            if base:
                per[cid] = {
                    "n": len(base),
                    "baseline": float(np.mean(base)),
                    "model": float(np.mean(pred)),
                    "diff": float(np.mean(pred) - np.mean(base)),
                }
            done += 1
            if progress:
                progress(name, done, steps)
        names = weights[0].keys() if weights else []
        report["variants"][name] = {
            "training_set": source,
            "left_out": list(leave_out),
            "overall": paired_bootstrap(all_pred, all_base, seed=seed) if all_base else None,
            "per_conversation": per,
            "worst": min((v["diff"] for v in per.values()), default=None),
            "mean_weights": {n: float(np.mean([w[n] for w in weights])) for n in names},
            "fused_minus_baseline_by_alpha": {
                str(a): float(np.mean(all_fused[a]) - np.mean(all_base)) for a in FUSION_ALPHAS
            }
            if all_base
            else {},
        }
    return report
