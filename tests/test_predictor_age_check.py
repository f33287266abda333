"""The age check (memlane.predictor.age_check) and its use by PredictorEngine.train.

Sessions are built so the answer is known: relevant memories always carry a noisy importance
signal, and their age either keeps its meaning over time or flips (old notes were the useful
ones until the newest sessions, which need young ones).
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from memlane.predictor import settings as C
from memlane.predictor.age_check import AGE_FEATURE, AgeCheck, age_free_masks, mask_age, run_age_check, without_age
from memlane.predictor.data import Session
from memlane.predictor.engine import PredictorEngine
from memlane.predictor.features import FEATURE_INDEX, CandidateFeatures, build_feature_matrix
from memlane.predictor.losses import listnet_loss
from memlane.predictor.model import MemoryScorer, ScorerConfig
from memlane.storage import predictor as pred_sql
from memlane.storage.db import Database
from memlane.storage.migrations import migrate

torch.set_num_threads(1)
DIM = 8
N_CAND = 12


def age_sessions(n: int, *, old_useful_until: int, seed: int = 0) -> list[Session]:
    """``n`` sessions, oldest first. Before session ``old_useful_until`` the relevant memories
    are 150-200 days old, from it on 0-10 days; the rest are 0-200 days old throughout."""
    rng = np.random.default_rng(seed)
    start = datetime(2026, 1, 5, 9, 0)
    out = []
    for s in range(n):
        relevant = np.zeros(N_CAND, dtype=bool)
        relevant[rng.choice(N_CAND, 3, replace=False)] = True
        old_era = s < old_useful_until
        rows = []
        for j in range(N_CAND):
            if relevant[j]:
                age = rng.uniform(150, 200) if old_era else rng.uniform(0, 10)
                importance = rng.uniform(0.45, 1.0)
            else:
                age, importance = rng.uniform(0, 200), rng.uniform(0.0, 0.7)
            rows.append(CandidateFeatures(age_days=float(age), importance=float(importance), access_count=0,
                                          session_gap_hours=8.0, is_embedded=True, baseline_score=0.0,
                                          baseline_rank=int(rng.integers(0, N_CAND))))
        emb = rng.normal(size=(N_CAND, DIM)).astype(np.float32)
        out.append(Session(features=build_feature_matrix(rows, start + timedelta(hours=6 * s)),
                           labels=np.where(relevant, 1.0, 0.0).astype(np.float32),
                           candidate_embeddings=emb / np.linalg.norm(emb, axis=1, keepdims=True),
                           context_embedding=np.ones(DIM, dtype=np.float32) / DIM ** 0.5,
                           project="p", session_id=f"s{s}"))
    return out


def newest_first(sessions: list[Session]) -> list[Session]:
    return list(reversed(sessions))


def linear_setup(seed: int = 0):
    model = MemoryScorer(ScorerConfig(native_dim=DIM), seed=seed)
    masks = model.feature_residual_masks()
    opt = torch.optim.Adam([model.gate_linear.weight], lr=C.LEARNING_RATE)
    return model, opt, masks


def check(sessions: list[Session], **kw) -> AgeCheck:
    model, opt, masks = linear_setup()
    args = dict(loss_fn=partial(listnet_loss, label_scale=C.LABEL_SCALE), masks=masks, native_dim=DIM,
                batch_size=512, share=0.25, max_seconds=60.0, max_epochs=200, early_stop_patience=40, seed=0)
    args.update(kw)
    return run_age_check(model, opt, newest_first(sessions), **args)


def test_flipped_age_is_masked():
    # 60 sessions: the newest 15 (the check's validation quarter) need young memories.
    result = check(age_sessions(60, old_useful_until=45))
    assert (result.train_sessions, result.validation_sessions) == (45, 15)
    assert result.masked
    assert result.ndcg_without_age > result.ndcg_with_age + 0.05
    assert 0 < result.standard_error < result.ndcg_without_age - result.ndcg_with_age


def test_age_that_keeps_its_meaning_is_kept():
    result = check(age_sessions(60, old_useful_until=0))  # young memories useful throughout
    assert not result.masked
    assert result.ndcg_with_age > result.ndcg_without_age
    assert result.to_dict()["masked"] is False


def test_masking_needs_the_win_to_exceed_min_t_standard_errors():
    def outcome(with_age: float, without: float, se: float, min_t: float = 1.0) -> AgeCheck:
        return AgeCheck(train_sessions=30, validation_sessions=10, ndcg_with_age=with_age,
                        ndcg_without_age=without, standard_error=se, min_t=min_t)

    assert outcome(0.40, 0.45, se=0.02).masked  # 2.5 standard errors
    assert not outcome(0.40, 0.41, se=0.02).masked  # 0.5: noise, age stays
    assert not outcome(0.45, 0.40, se=0.0).masked  # age wins
    assert outcome(0.40, 0.41, se=0.02, min_t=0.0).masked
    assert not outcome(0.40, 0.40, se=0.0, min_t=0.0).masked  # a tie keeps age
    one = AgeCheck(train_sessions=30, validation_sessions=1, ndcg_with_age=0.2, ndcg_without_age=0.9,
                   standard_error=0.0, min_t=1.0)
    assert not one.masked  # one scored session is no evidence
    assert C.AGE_CHECK_MIN_T == 1.0


def test_bad_split_refused():
    sessions = age_sessions(3, old_useful_until=0)
    with pytest.raises(ValueError, match="share"):
        check(sessions, share=1.0)
    with pytest.raises(ValueError, match="both sides"):
        check(sessions[:2], share=0.25)  # int(2 * 0.25) = 0 sessions to validate on


def test_mask_age_zeroes_only_the_age_column_of_a_copy():
    model, _, masks = linear_setup()
    masked = mask_age(model, masks)
    col = model.feature_column(AGE_FEATURE)
    diff = (masks["gate_linear.weight"] - masked["gate_linear.weight"]).nonzero().tolist()
    assert diff == [[0, col]]
    assert masks["gate_linear.weight"][0, col] == 1.0  # the caller's masks are untouched


def test_without_age_zeroes_weight_and_adam_state_on_copies():
    model, opt, masks = linear_setup()
    col = model.feature_column(AGE_FEATURE)
    # Give the age weight a value and Adam moments, as an earlier run would have.
    for _ in range(3):
        opt.zero_grad()
        model.gate_linear.weight.grad = torch.ones_like(model.gate_linear.weight) * masks["gate_linear.weight"]
        opt.step()
    assert model.gate_linear.weight[0, col] != 0
    clone, clone_opt = without_age(model, opt)
    w = clone.gate_linear.weight
    assert w[0, col] == 0
    state = clone_opt.state[w]
    assert state["exp_avg"][0, col] == 0 and state["exp_avg_sq"][0, col] == 0
    # The copy's optimiser drives the copy's parameter, and the originals are untouched.
    assert clone_opt.param_groups[0]["params"][0] is w
    assert model.gate_linear.weight[0, col] != 0 and opt.state[model.gate_linear.weight]["exp_avg"][0, col] != 0
    # A masked gradient now leaves the weight at 0 through further steps.
    for _ in range(3):
        clone_opt.zero_grad()
        w.grad = torch.ones_like(w) * mask_age(clone, masks)["gate_linear.weight"]
        clone_opt.step()
    assert w[0, col] == 0


def test_engine_masks_age_then_learns_it_back(tmp_path: Path):
    engine = PredictorEngine(tmp_path / "m", embedding_model_id="test-8", native_dim=DIM)
    col = engine.model.feature_column(AGE_FEATURE)
    flipped = age_sessions(60, old_useful_until=45, seed=1)
    report = engine.train(newest_first(flipped), save=False)
    assert report.stage == "linear" and report.accepted, report
    assert report.age_check is not None and report.age_check["masked"] is True
    assert report.age_check["validation_sessions"] == 15
    assert float(engine.model.gate_linear.weight.detach()[0, col]) == 0.0
    assert float(engine.model.gate_linear.weight.detach()[0, engine.model.feature_column("importance")]) > 0.0
    # The user's sessions change again: young memories are useful throughout. The next run's
    # check keeps age, and the model learns it ("newer is better": a negative weight).
    steady = age_sessions(60, old_useful_until=0, seed=2)
    report = engine.train(newest_first(steady), save=False, influential=False)
    assert report.age_check is not None and report.age_check["masked"] is False
    assert report.accepted, report
    assert float(engine.model.gate_linear.weight.detach()[0, col]) < 0.0


def test_engine_skips_the_check_below_the_minimum(tmp_path: Path):
    engine = PredictorEngine(tmp_path / "m", embedding_model_id="test-8", native_dim=DIM)
    sessions = age_sessions(C.AGE_CHECK_MIN_SESSIONS - 1, old_useful_until=0)
    report = engine.train(newest_first(sessions), save=False)
    assert report.age_check is None
    assert report.to_dict()["age_check"] is None


def test_training_log_keeps_the_age_check(tmp_path: Path):
    db = Database(tmp_path / "memories.db")
    migrate(db)
    outcome = AgeCheck(train_sessions=45, validation_sessions=15, ndcg_with_age=0.41,
                       ndcg_without_age=0.52, standard_error=0.03, min_t=1.0).to_dict()
    assert outcome["masked"] is True
    row = {"model_version": 2, "trigger": "interval", "accepted": 1, "steps": 10, "sample_count": 60,
           "duration_ms": 12.0, "drift_resets": 0, "created_at": "2026-11-22T10:00:00.000Z", "age_check": outcome}
    db.write(lambda c: pred_sql.insert_training_log(c, row))
    db.write(lambda c: pred_sql.insert_training_log(c, {**row, "age_check": None}))
    newest, older = db.read(lambda c: pred_sql.training_log(c))
    assert older["age_check"] == outcome and newest["age_check"] is None
    raw = db.read(lambda c: c.execute("SELECT age_check FROM predictor_training_log ORDER BY id").fetchone()[0])
    assert json.loads(raw) == outcome
    db.close()


def test_age_free_masks_cover_every_parameter_but_the_age_columns():
    model, _, _ = linear_setup()
    masks = age_free_masks(model)
    assert set(masks) == {name for name, _ in model.named_parameters()}
    col = model.feature_column(AGE_FEATURE)
    for name, m in masks.items():
        zeros = (m == 0).nonzero().tolist()
        if name in ("gate_linear.weight", "gate_hidden.weight"):
            assert sorted({c for _, c in zeros}) == [col] and len(zeros) == m.shape[0]
        else:
            assert not zeros, name


def test_without_age_also_clears_the_mlp_column():
    model, opt, _ = linear_setup()
    col = model.feature_column(AGE_FEATURE)
    assert model.gate_hidden.weight[:, col].abs().sum() > 0  # randomly initialised
    clone, _ = without_age(model, opt)
    assert clone.gate_hidden.weight[:, col].abs().sum() == 0
    assert torch.equal(clone.gate_hidden.weight[:, :col], model.gate_hidden.weight[:, :col])


def test_full_stage_run_without_age_never_reads_it(tmp_path: Path):
    # A Phase 6 base is trained like this: every parameter learns except the age columns.
    engine = PredictorEngine(tmp_path / "m", embedding_model_id="test-8", native_dim=DIM)
    sessions = age_sessions(C.FULL_MODEL_MIN_SESSIONS, old_useful_until=0, seed=3)
    before = {n: p.detach().clone() for n, p in engine.model.named_parameters()}
    report = engine.train(newest_first(sessions), save=False, learn_age=False, max_epochs=2)
    assert report.stage == "full" and report.age_check is None and report.steps > 0
    model = engine.model if report.accepted else None
    assert model is not None, report
    col = model.feature_column(AGE_FEATURE)
    assert float(model.gate_linear.weight.detach()[0, col]) == 0.0
    assert float(model.gate_hidden.weight.detach()[:, col].abs().sum()) == 0.0
    changed = [n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])]
    assert "gate_hidden.weight" in changed and "down_projection.weight" in changed
    # Scores do not depend on age at all.
    probe = newest_first(sessions)[:4]
    shifted = [Session(features=s.features.copy(), labels=s.labels, candidate_embeddings=s.candidate_embeddings,
                       context_embedding=s.context_embedding, project=s.project) for s in probe]
    age_col = FEATURE_INDEX[AGE_FEATURE]
    for s in shifted:
        s.features[:, age_col] = s.features[:, age_col][::-1] + 3.0
    for a, b in zip(probe, shifted):
        np.testing.assert_allclose(engine.score(a), engine.score(b), rtol=0, atol=1e-6)
