"""MemoryScorer: parameter budget, determinism, padding, the two encoding paths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from memlane.predictor.data import Session, collate
from memlane.predictor.features import NUM_FEATURES
from memlane.predictor.model import MemoryScorer, ScorerConfig, configure_threads
from memlane.predictor.padding import PADDED_Y_VALUE
from memlane.predictor.synthetic import make_sessions

torch.set_num_threads(1)
DIM = 16


def _model(seed: int = 0) -> MemoryScorer:
    return MemoryScorer(ScorerConfig(native_dim=DIM), seed=seed)


def _wired(seed: int = 0) -> MemoryScorer:
    """A model whose zero-initialised residual (gate MLP output, non-prior gate weights) has
    random weights, as after training: every path then reaches the score."""
    model = _model(seed)
    gen = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for p in (model.gate_out.weight, model.gate_out.bias, model.gate_linear.weight, model.gate_linear.bias):
            p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
    return model


def test_untrained_model_ranks_exactly_like_the_baseline():
    from memlane.predictor.features import FEATURE_INDEX
    from memlane.predictor.model import BASELINE_PRIOR

    s = _session(12, seed=11)
    scores = _model().score(collate([s], native_dim=DIM))[0].numpy()
    prior = sum(w * s.features[:, FEATURE_INDEX[k]] for k, w in BASELINE_PRIOR.items())
    np.testing.assert_allclose(scores, prior, rtol=1e-5, atol=1e-5)


def _session(n: int, *, seed: int = 0, embedded: bool = True, texts: bool = True) -> Session:
    rng = np.random.default_rng(seed)
    return Session(
        features=rng.normal(size=(n, NUM_FEATURES)).astype(np.float32),
        labels=rng.uniform(size=n).astype(np.float32),
        candidate_texts=[f"memory {i} about topic{rng.integers(5)}" for i in range(n)] if texts else (),
        candidate_embeddings=rng.normal(size=(n, DIM)).astype(np.float32) if embedded else None,
        context_embedding=rng.normal(size=DIM).astype(np.float32) if embedded else None,
        context_text="what about topic1 and topic3",
        project="memlane",
    )


def test_parameter_budget():
    model = MemoryScorer()  # default config: native_dim 384, d=64, 16,384 buckets
    n = model.count_parameters()
    print(f"MemoryScorer parameters (native_dim=384): {n:,}")
    assert n < 2_000_000
    assert model.text_embedding.weight.shape == (16_385, 64)
    assert MemoryScorer(ScorerConfig(native_dim=768)).count_parameters() < 2_000_000


def test_same_seed_same_weights_and_scores():
    a, b, c = _model(7), _model(7), _model(8)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(pa, pb), name
    assert not torch.equal(a.query.weight, c.query.weight)
    state = torch.get_rng_state()
    _model(9)
    assert torch.equal(state, torch.get_rng_state())  # global RNG untouched
    batch = collate([_session(10)], native_dim=DIM)
    assert torch.equal(a.score(batch), b.score(batch))


def test_output_shape_and_padding():
    model = _model()
    short, long = _session(3, seed=1), _session(9, seed=2)
    batch = collate([short, long], native_dim=DIM)
    scores = model.score(batch)
    assert scores.shape == (2, 9) and scores.dtype == torch.float32
    assert bool(torch.isfinite(scores).all())
    assert torch.equal(scores[0, 3:], torch.zeros(6))
    # Padding must not change the real candidates' scores.
    alone = model.score(collate([short], native_dim=DIM))
    torch.testing.assert_close(scores[0, :3], alone[0], rtol=1e-5, atol=1e-5)


def test_embedding_path_ignores_text_and_text_path_ignores_embedding():
    model = _wired()
    base = _session(6, seed=3)
    flags = np.array([True, True, True, False, False, False])
    s1 = dataclasses.replace(base, candidate_is_embedded=flags)
    texts = list(s1.candidate_texts)
    texts[0] = "completely different words"  # embedded candidate: text unused
    emb = s1.candidate_embeddings.copy()
    emb[4] += 5.0  # text-only candidate: embedding unused
    s2 = dataclasses.replace(s1, candidate_texts=texts, candidate_embeddings=emb)
    a, b = model.score(collate([s1], native_dim=DIM)), model.score(collate([s2], native_dim=DIM))
    torch.testing.assert_close(a, b)
    # ...while the text of a text-only candidate and the embedding of an embedded one matter.
    texts[3] = "completely different words"
    emb[1] += 5.0
    c = model.score(collate([dataclasses.replace(s1, candidate_texts=texts, candidate_embeddings=emb)], native_dim=DIM))
    assert c[0, 3] != a[0, 3] and c[0, 1] != a[0, 1]


def test_context_paths_and_project():
    model = _wired()
    s = _session(5, seed=4)
    a = model.score(collate([s], native_dim=DIM))
    # An embedded context ignores its text; a text-only context uses it.
    b = model.score(collate([dataclasses.replace(s, context_text="unrelated")], native_dim=DIM))
    torch.testing.assert_close(a, b)
    t = dataclasses.replace(s, context_embedding=None)
    c = model.score(collate([t], native_dim=DIM))
    d = model.score(collate([dataclasses.replace(t, context_text="unrelated")], native_dim=DIM))
    assert not torch.allclose(c, d)
    e = model.score(collate([dataclasses.replace(s, project="other-project")], native_dim=DIM))
    assert not torch.allclose(a, e)


def test_text_only_sessions_and_gradients_reach_both_paths():
    model = _wired()
    batch = collate([_session(4, seed=5, embedded=False), _session(7, seed=6)], native_dim=DIM)
    scores = model(batch)
    assert bool(torch.isfinite(scores).all())
    (scores * batch.mask).sum().backward()
    for name in (
        "down_projection.weight",
        "text_embedding.weight",
        "query.weight",
        "key.weight",
        "value.weight",
        "project_embedding.weight",
        "gate_linear.weight",
    ):
        grad = dict(model.named_parameters())[name].grad
        assert grad is not None and float(grad.abs().sum()) > 0, name
    assert float(model.text_embedding.weight.grad[0].abs().sum()) == 0.0  # PAD row never learns


def test_session_validation_and_collate_errors():
    with pytest.raises(ValueError, match="features"):
        Session(features=np.zeros((0, NUM_FEATURES), dtype=np.float32))
    with pytest.raises(ValueError, match="labels"):
        Session(features=np.zeros((2, NUM_FEATURES)), labels=np.zeros(3))
    with pytest.raises(ValueError, match="candidate_texts"):
        Session(features=np.zeros((2, NUM_FEATURES)), candidate_texts=["a"])
    with pytest.raises(ValueError, match="candidate_is_embedded"):
        Session(features=np.zeros((2, NUM_FEATURES)), candidate_is_embedded=np.ones(2, dtype=bool))
    with pytest.raises(ValueError, match="width"):
        collate([_session(2)], native_dim=DIM + 1)
    with pytest.raises(ValueError):
        collate([], native_dim=DIM)


def test_collate_layout():
    sessions = make_sessions(3, n_candidates=5, n_relevant=2, native_dim=DIM, seed=1)
    sessions[1] = dataclasses.replace(
        sessions[1],
        features=sessions[1].features[:2],
        labels=sessions[1].labels[:2],
        candidate_embeddings=sessions[1].candidate_embeddings[:2],
    )
    batch = collate(sessions, native_dim=DIM)
    assert batch.mask.sum(dim=-1).tolist() == [5, 2, 5]
    assert batch.labels[1, 2:].eq(PADDED_Y_VALUE).all() and batch.features[1, 2:].eq(0).all()
    assert batch.candidate_embeddings.shape == (3, 5, DIM) and batch.candidate_tokens.shape[:2] == (3, 5)


def test_configure_threads():
    before = torch.get_num_threads()
    try:
        configure_threads(1)
        assert torch.get_num_threads() == 1
        with pytest.raises(ValueError):
            configure_threads(0)
    finally:
        torch.set_num_threads(before)


def _encode_both_paths(model: MemoryScorer, embeddings, tokens, is_embedded):
    """Reference encoder: both paths on every item, then the per-item select (the seed's design)."""
    lead = is_embedded.shape
    dense = model.norm_embedded(model.down_projection(embeddings))
    text = model.norm_text(model.text_embedding(tokens.reshape(-1, tokens.shape[-1]))).reshape(*lead, -1)
    return torch.where(is_embedded.unsqueeze(-1), dense, text)


@pytest.mark.parametrize("mixed", [False, True])
def test_text_path_on_text_items_only_matches_both_paths(monkeypatch, mixed):
    """The encoder runs the text path only where it is taken (and padded slots take the
    embedding path); scores and every gradient equal the run-both-and-select reference."""
    s1 = _session(7, seed=8)
    s2 = _session(4, seed=9)  # padded to 7 in the batch
    if mixed:
        s1 = dataclasses.replace(s1, candidate_is_embedded=np.array([True, False, True, True, False, True, True]))
    batch = collate([s1, s2], native_dim=DIM)

    def run(model: MemoryScorer) -> tuple[torch.Tensor, dict[str, torch.Tensor | None]]:
        scores = model(batch)
        (scores * torch.linspace(0.5, 1.5, scores.shape[-1])).sum().backward()
        return scores.detach(), {n: p.grad for n, p in model.named_parameters()}

    fast, fast_grads = run(_wired())
    reference = _wired()
    monkeypatch.setattr(reference, "encode", lambda e, t, f: _encode_both_paths(reference, e, t, f))
    ref, ref_grads = run(reference)
    torch.testing.assert_close(fast, ref)
    for name, g in ref_grads.items():
        if fast_grads[name] is None:  # skipped path: the reference's gradient there is all zero
            assert name.startswith(("text_embedding.", "norm_text.")) and not mixed, name
            assert float(g.abs().sum()) == 0.0, name
        else:
            torch.testing.assert_close(fast_grads[name], g, msg=name)
