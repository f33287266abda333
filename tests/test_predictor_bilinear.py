"""The context x memory bilinear term (docs/predictor.md, "Bilinear term"): its subspace, its
score against a NumPy reference, that it learns what a similarity matcher cannot, and that
checkpoints keep it while older ones load without it."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
import torch

from memlane.config import predictor as C
from memlane.predictor import checkpoint as ckpt
from memlane.predictor.data import collate, memory_basis
from memlane.predictor.engine import PredictorEngine, bilinear_l2
from memlane.predictor.features import CURRENT_SCHEMA
from memlane.predictor.losses import listnet_loss
from memlane.predictor.metrics import ndcg_at_k
from memlane.predictor.model import MemoryScorer, ScorerConfig
from memlane.predictor.synthetic import make_sessions
from memlane.predictor.train import Constraints, FitConfig, fit
from predictor_checkpoint_helpers import writer_without

torch.set_num_threads(1)
DIM = 32
LOSS = partial(listnet_loss, label_scale=C.LABEL_SCALE)


def topic_sessions(n: int, seed: int):
    return make_sessions(n, signal="topic", native_dim=DIM, n_candidates=20, n_relevant=4, seed=seed)


def mean_ndcg(model: MemoryScorer, sessions) -> float:
    batch = collate(sessions, native_dim=DIM)
    return float(ndcg_at_k(model.score(batch), batch.labels, 10).mean())


def test_the_basis_is_the_principal_directions_of_the_distinct_vectors():
    sessions = topic_sessions(6, seed=1)
    batches = [collate(sessions[:3], native_dim=DIM), collate(sessions[3:], native_dim=DIM)]
    basis = memory_basis(batches, 8, DIM)
    assert basis.shape == (DIM, 8)
    torch.testing.assert_close(basis.T @ basis, torch.eye(8), atol=1e-5, rtol=0)
    # the same as numpy's PCA of the distinct embedded candidates (up to each column's sign)
    x = np.unique(np.concatenate([s.candidate_embeddings for s in sessions]), axis=0).astype(np.float64)
    vt = np.linalg.svd(x - x.mean(0), full_matrices=False)[2][:8]
    np.testing.assert_allclose(np.abs(np.sum(vt.T * basis.numpy(), 0)), 1.0, atol=1e-4)
    # repeats count once: duplicating a session changes nothing
    again = memory_basis([collate(sessions + sessions[:2], native_dim=DIM)], 8, DIM)
    np.testing.assert_allclose(np.abs(np.sum(again.numpy() * basis.numpy(), 0)), 1.0, atol=1e-4)
    # fewer distinct vectors than columns: the rest are 0; none embedded: all 0
    few = memory_basis([collate(sessions[:1], native_dim=DIM)], 64, DIM)
    assert int((few.abs().sum(0) > 0).sum()) <= 20 - 1 and few.shape == (DIM, 64)
    text = make_sessions(2, signal="text", native_dim=DIM, seed=3)
    assert not memory_basis([collate(text, native_dim=DIM)], 8, DIM).any()


def test_the_term_matches_a_numpy_reference_and_skips_unembedded_items():
    sessions = topic_sessions(3, seed=2)
    batch = collate(sessions, native_dim=DIM)
    model = MemoryScorer(ScorerConfig(native_dim=DIM), seed=0)
    plain = model.score(batch)
    assert not model.bilinear_scores(batch).any()  # W = 0 and no basis: scores as before
    basis = memory_basis([batch], model.config.bilinear_rank, DIM)
    model.set_memory_basis(basis)
    torch.testing.assert_close(model.score(batch), plain)  # a basis alone changes nothing (W = 0)
    w = torch.randn(model.config.bilinear_rank, model.config.bilinear_rank, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        model.context_bilinear.copy_(w)
    b, c, m = basis.numpy().astype(np.float64), batch.context_embedding.numpy(), batch.candidate_embeddings.numpy()
    ref = np.einsum("br,rs,bns->bn", c @ b, w.numpy(), m @ b)
    np.testing.assert_allclose(
        model.bilinear_scores(batch).detach().numpy(), ref * batch.mask.numpy(), rtol=1e-4, atol=1e-4
    )
    torch.testing.assert_close(model.score(batch) - plain, model.bilinear_scores(batch).detach(), atol=1e-4, rtol=1e-4)
    batch.candidate_is_embedded[0, :5] = False
    batch.context_is_embedded[1] = False
    term = model.bilinear_scores(batch)
    assert not term[0, :5].any() and not term[1].any() and term[2].abs().sum() > 0


def test_a_new_basis_carries_the_bilinear_form_over():
    batch = collate(topic_sessions(3, seed=4), native_dim=DIM)
    model = MemoryScorer(ScorerConfig(native_dim=DIM), seed=0)
    model.set_memory_basis(memory_basis([batch], 64, DIM))
    with torch.no_grad():
        model.context_bilinear.copy_(torch.randn(64, 64, generator=torch.Generator().manual_seed(5)))
    before = model.bilinear_scores(batch).detach()
    # the same subspace, columns permuted and negated: the same scores
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(6))
    model.set_memory_basis(-model.memory_basis[:, perm].clone())
    torch.testing.assert_close(model.bilinear_scores(batch).detach(), before, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError):
        model.set_memory_basis(torch.zeros(DIM, 3))
    with pytest.raises(ValueError):
        model.set_memory_basis(torch.full((DIM, 64), float("nan")))
    model.set_memory_basis(torch.zeros(DIM, 64))  # no subspace: no term
    assert not model.bilinear_scores(batch).any() and not model.context_bilinear.any()


def test_the_linear_stage_learns_a_topic_no_similarity_or_feature_shows():
    """Relevance follows the session's topic, which the context-memory cosine and the features
    do not show: the feature residual alone stays near chance, with the bilinear term it learns."""
    train = topic_sessions(80, seed=7)
    held = topic_sessions(30, seed=8)
    batches = [collate(train, native_dim=DIM)]
    live = MemoryScorer(ScorerConfig(native_dim=DIM), seed=0)
    untrained = mean_ndcg(live, held)
    masks = live.feature_residual_masks()
    features_only = {"gate_linear.weight": masks["gate_linear.weight"]}
    runs = {}
    for name, grad_masks, basis in (
        ("features", features_only, None),
        ("bilinear", masks, memory_basis(batches, 64, DIM)),
    ):
        opt = torch.optim.Adam([dict(live.named_parameters())[n] for n in grad_masks], lr=C.LEARNING_RATE)
        result = fit(
            live,
            opt,
            LOSS,
            batches,
            FitConfig(max_epochs=200, early_stop_patience=40, previous_is_trained=False),
            Constraints(grad_masks=grad_masks, memory_basis=basis, bilinear_l2=bilinear_l2(len(train))),
        )
        assert result.accepted
        runs[name] = mean_ndcg(result.model, held)
    assert abs(runs["features"] - untrained) < 0.1
    assert runs["bilinear"] > untrained + 0.3, (untrained, runs)


def test_the_bilinear_l2_is_strong_on_few_sessions_and_fades_faster_than_one_over_n():
    """10 / n^1.5: ~16 times the old 0.2 / n at 10 sessions, equal to it at 2,500, below after."""
    assert bilinear_l2(10) == pytest.approx(10 / 10**1.5)
    assert bilinear_l2(10) > 15 * (0.2 / 10)
    assert bilinear_l2(2500) == pytest.approx(0.2 / 2500)
    assert bilinear_l2(3000) < 0.2 / 3000
    assert bilinear_l2(0) == bilinear_l2(1) == pytest.approx(10.0)
    values = [bilinear_l2(n) for n in range(1, 500)]
    assert all(a > b > 0 for a, b in zip(values, values[1:]))


def test_the_engine_sets_the_basis_and_trains_the_term(tmp_path):
    engine = PredictorEngine(tmp_path, embedding_model_id="test-32", native_dim=DIM)
    assert not engine.model.memory_basis.any()
    report = engine.train(topic_sessions(60, seed=9), save=True)
    assert report.accepted and report.stage == "linear"
    assert engine.model.memory_basis.any() and engine.model.context_bilinear.abs().sum() > 0
    held = topic_sessions(20, seed=10)
    again = PredictorEngine(tmp_path, embedding_model_id="test-32", native_dim=DIM)  # from model.bin
    torch.testing.assert_close(again.model.memory_basis, engine.model.memory_basis)
    torch.testing.assert_close(again.model.context_bilinear, engine.model.context_bilinear)
    assert mean_ndcg(again.model, held) == pytest.approx(mean_ndcg(engine.model, held))


def test_older_checkpoints_load_with_the_term_at_zero(tmp_path):
    batch = collate(topic_sessions(2, seed=11), native_dim=DIM)
    old = writer_without("memory_basis", "context_bilinear")(ScorerConfig(native_dim=DIM), seed=2)
    meta = ckpt.CheckpointMeta("test-32", CURRENT_SCHEMA, {})
    ckpt.save(tmp_path / "old.bin", old, meta)
    loaded = ckpt.load(tmp_path / "old.bin", embedding_model_id="test-32", native_dim=DIM).model
    assert not loaded.memory_basis.any() and not loaded.context_bilinear.any()
    torch.testing.assert_close(loaded.score(batch), old.score(batch))


def test_fit_rejects_a_negative_bilinear_l2():
    live = MemoryScorer(ScorerConfig(native_dim=DIM), seed=0)
    opt = torch.optim.Adam(live.parameters(), lr=1e-3)
    with pytest.raises(ValueError):
        fit(
            live,
            opt,
            LOSS,
            [collate(topic_sessions(2, seed=1), native_dim=DIM)],
            constraints=Constraints(bilinear_l2=-1.0),
        )
