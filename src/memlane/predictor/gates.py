"""Validation gates a retrained model must pass before it replaces the live one.

Seed "Negative Memory Signals" -> "Training schedule" and "Canary Evaluation Set": after
training, the candidate model is compared with the previous model on a fixed canary set::

    losses_finite        every training loss is finite (no NaN/Inf)
    parameters_finite    every candidate parameter is finite
    score_variance       mean per-session score variance on the canary > 0 (not collapsed)
    top5_overlap         mean top-5 overlap with the previous model >= 0.6 (no forgetting)
    ndcg_drop            canary NDCG@10 (previous - candidate) <= 0.15

The swap is all or nothing: the caller replaces the live model only if :attr:`GateReport.passed`.
Gates that cannot apply are reported as skipped (and pass): the canary gates without a canary
set, the two comparison gates while the previous model is untrained (cold start), and the
NDCG gate on a canary without positive labels or without a session the previous model did
not train on.

The NDCG comparison leaves out the canary sessions the previous model trained on. The
candidate never sees a canary session (they are held out of its training), so on a session
its predecessor learned from the comparison sets an in-sample score against a held-out one.
The canary takes in recent sessions, and those can be ones the live model trained on before
they joined it; compared on them, every candidate would lose to its predecessor's in-sample
score (docs/predictor.md, "The canary compares held-out sessions only").
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass

import torch

from memlane.predictor.data import SessionBatch
from memlane.predictor.metrics import ndcg_at_k, topk_overlap
from memlane.predictor.model import MemoryScorer

__all__ = ["GateReport", "GateResult", "GateThresholds", "evaluate_gates"]


@dataclass(frozen=True)
class GateThresholds:
    """Thresholds of the gates (seed defaults)."""

    min_score_variance: float = 1e-10
    min_topk_overlap: float = 0.6
    max_ndcg_drop: float = 0.15
    top_k: int = 5
    ndcg_k: int = 10


@dataclass(frozen=True)
class GateResult:
    """One gate: its measured value, its threshold and the verdict."""

    name: str
    passed: bool
    value: float | None = None
    threshold: float | None = None
    skipped: bool = False
    detail: str = ""


@dataclass(frozen=True)
class GateReport:
    """All gates of one training run plus the canary figures the training log stores."""

    gates: tuple[GateResult, ...]
    canary_ndcg: float | None = None
    previous_canary_ndcg: float | None = None

    @property
    def passed(self) -> bool:
        """True when every gate passed (the candidate may replace the live model)."""
        return all(g.passed for g in self.gates)

    @property
    def failed(self) -> list[str]:
        """Names of the gates that failed, in gate order."""
        return [g.name for g in self.gates if not g.passed]

    def gate(self, name: str) -> GateResult:
        """The result of gate ``name``.

        Raises:
            StopIteration: no gate of that name ran.
        """
        return next(g for g in self.gates if g.name == name)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (the training log's ``gates`` column)."""
        return {
            "passed": self.passed,
            "gates": [asdict(g) for g in self.gates],
            "canary_ndcg": self.canary_ndcg,
            "previous_canary_ndcg": self.previous_canary_ndcg,
        }


def _skip(name: str, detail: str, threshold: float | None = None) -> GateResult:
    return GateResult(name, passed=True, threshold=threshold, skipped=True, detail=detail)


def _scores(model: MemoryScorer, canary: Sequence[SessionBatch]) -> list[torch.Tensor]:
    return [model.score(b) for b in canary]


def _score_variance(scores: list[torch.Tensor], canary: Sequence[SessionBatch]) -> float:
    per_session: list[torch.Tensor] = []
    for s, b in zip(scores, canary):
        n = b.mask.sum(dim=-1)
        mean = torch.where(b.mask, s, 0.0).sum(dim=-1) / n.clamp_min(1)
        var = torch.where(b.mask, (s - mean.unsqueeze(-1)) ** 2, 0.0).sum(dim=-1) / n.clamp_min(1)
        per_session.append(var[n >= 2])
    values = torch.cat(per_session) if per_session else torch.empty(0)
    return float(values.to(torch.float64).mean()) if values.numel() else float("nan")


def _mean_ndcg(
    scores: list[torch.Tensor], canary: Sequence[SessionBatch], k: int, leave_out: Collection[str] = ()
) -> float:
    """Mean NDCG@k over canary sessions with a positive gain whose id is not in ``leave_out``;
    NaN when there are none."""
    total, count = 0.0, 0
    for s, b in zip(scores, canary):
        informative = b.labels.clamp_min(0.0).amax(dim=-1) > 0
        if leave_out:
            kept = [i >= len(b.session_ids) or b.session_ids[i] not in leave_out for i in range(informative.shape[0])]
            informative = informative & torch.tensor(kept, dtype=torch.bool)
        if bool(informative.any()):
            total += float(ndcg_at_k(s, b.labels, k)[informative].sum())
            count += int(informative.sum())
    return total / count if count else float("nan")


def evaluate_gates(
    candidate: MemoryScorer,
    previous: MemoryScorer,
    canary: Sequence[SessionBatch] | None,
    losses: Sequence[float],
    *,
    thresholds: GateThresholds = GateThresholds(),
    previous_is_trained: bool = True,
    check_overlap: bool = True,
    previous_trained_on: Collection[str] = (),
) -> GateReport:
    """Run every gate; never raises on a bad model (a bad model fails gates).

    Args:
        candidate: the retrained model.
        previous: the live model it would replace.
        canary: canary batches (labels ``[B, N]`` padded with ``PADDED_Y_VALUE``), or ``None``.
        losses: every training-step loss of the run (nats).
        thresholds: the gate thresholds.
        previous_is_trained: False at cold start: the comparison gates are skipped.
        check_overlap: False while the live model has no influence on rankings (alpha = 1):
            top-5 churn then changes nothing a user sees, and holding a weak first model's
            top-5 against better successors would freeze learning; the NDCG gate still applies.
        previous_trained_on: ids of the sessions the previous model (and the models it was
            trained from) learned from: the NDCG gate and the reported canary NDCGs leave them
            out (module docstring). Variance and overlap use the whole canary.

    Returns:
        a :class:`GateReport`; ``report.passed`` decides the swap.
    """
    bad_losses = sum(1 for x in losses if not math.isfinite(x))
    gates = [GateResult("losses_finite", bad_losses == 0, float(bad_losses), 0.0, detail="non-finite losses")]
    bad_params = sum(int((~torch.isfinite(p)).sum()) for p in candidate.parameters())
    gates.append(GateResult("parameters_finite", bad_params == 0, float(bad_params), 0.0, detail="non-finite params"))
    t = thresholds
    if not canary:
        gates += [_skip(n, "no canary set") for n in ("score_variance", "top5_overlap", "ndcg_drop")]
        return GateReport(tuple(gates))
    new_scores = _scores(candidate, canary)
    variance = _score_variance(new_scores, canary)
    gates.append(GateResult("score_variance", variance > t.min_score_variance, variance, t.min_score_variance))
    old_scores = _scores(previous, canary)
    leave_out = frozenset(previous_trained_on) if previous_is_trained else frozenset()
    new_ndcg = _mean_ndcg(new_scores, canary, t.ndcg_k, leave_out)
    old_ndcg = _mean_ndcg(old_scores, canary, t.ndcg_k, leave_out)
    if not previous_is_trained:
        gates.append(_skip("top5_overlap", "previous model untrained (cold start)", t.min_topk_overlap))
        gates.append(_skip("ndcg_drop", "previous model untrained (cold start)", t.max_ndcg_drop))
    else:
        overlaps = [topk_overlap(n, o, b.mask, t.top_k) for n, o, b in zip(new_scores, old_scores, canary)]
        overlap = float(torch.cat(overlaps).mean())
        if check_overlap:
            gates.append(GateResult("top5_overlap", overlap >= t.min_topk_overlap, overlap, t.min_topk_overlap))
        else:
            gates.append(
                GateResult(
                    "top5_overlap",
                    True,
                    overlap,
                    t.min_topk_overlap,
                    skipped=True,
                    detail="live model has no influence yet (alpha = 1)",
                )
            )
        if math.isnan(old_ndcg) and math.isnan(new_ndcg):
            why = (
                "every canary session with a positive label was trained on by the previous model"
                if leave_out and not math.isnan(_mean_ndcg(new_scores, canary, t.ndcg_k))
                else "canary has no positive labels"
            )
            gates.append(_skip("ndcg_drop", why, t.max_ndcg_drop))
        else:
            drop = old_ndcg - new_ndcg
            gates.append(GateResult("ndcg_drop", drop <= t.max_ndcg_drop, drop, t.max_ndcg_drop))
    return GateReport(
        tuple(gates),
        canary_ndcg=None if math.isnan(new_ndcg) else new_ndcg,
        previous_canary_ndcg=None if math.isnan(old_ndcg) else old_ndcg,
    )
