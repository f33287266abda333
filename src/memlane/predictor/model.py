"""The cross-attention memory scorer (seed "Model: Cross-Attention Memory Scorer").

Architecture after ACAN (Hong & He, "Enhancing Memory Retrieval in Generative Agents through
LLM-Trained Cross Attention Networks", 2025): the session context is the query, the
candidate memories are keys and values, and scaled dot-product attention (Vaswani et al.
2017) scores each candidate. Memlane's additions follow the seed: two encoding paths with
per-path LayerNorm, a 32-slot project embedding, and a learned gate over attention,
similarity, value and feature signals that outputs one score per candidate. Added to that
score: a bilinear term between the context's and the candidate's embeddings in the user's
own principal subspace (:meth:`MemoryScorer.bilinear_scores`; docs/predictor.md, "Bilinear
term"), which the small-data stage trains with the feature weights.

No dropout and no batch statistics: ``train()`` and ``eval()`` compute the same function, so
an immutable live model can be scored from any thread while a clone trains.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from memlane.predictor.data import SessionBatch
from memlane.predictor.features import FEATURE_INDEX, NUM_FEATURES
from memlane.predictor.prior import BASELINE_PRIOR
from memlane.predictor.tokenizer import MAX_TOKENS, NUM_BUCKETS, PAD_TOKEN_ID, PROJECT_SLOTS

__all__ = ["MemoryScorer", "ScorerConfig", "configure_threads"]

# The baseline prior's weights live with the torch-free untrained scorer (memlane.predictor.prior),
# which the daemon uses before a user has a model; re-exported here.


def baseline_prior_weights() -> torch.Tensor:
    """The untrained model's feature weights, float ``[NUM_FEATURES]``: :data:`BASELINE_PRIOR`
    on its two columns, 0 elsewhere (the centre of the linear stage's prior, train.fit)."""
    w = torch.zeros(NUM_FEATURES)
    for name, weight in BASELINE_PRIOR.items():
        w[FEATURE_INDEX[name]] = weight
    return w


# Fill for padded attention logits: finite, so a fully padded row stays NaN-free.
_MASKED_LOGIT = -1.0e9


@dataclass(frozen=True)
class ScorerConfig:
    """Hyper-parameters of :class:`MemoryScorer` (seed "Parameter Budget", d=64).

    Attributes:
        native_dim: width of the embedding model's vectors (384 for all-MiniLM-L6-v2).
        d_model: internal dimension ``d`` of Q, K and both encoding paths.
        d_value: width of the value projection.
        num_buckets: HashTrick buckets (fixed at 16,384 so base weights transfer).
        project_slots: rows of the project embedding table.
        num_features: feature columns (the feature schema's length).
        gate_hidden: hidden width of the gate MLP.
        max_tokens: token cap per text on the text path.
        bilinear_rank: width ``r`` of the context x memory bilinear term's subspace
            (:meth:`MemoryScorer.set_memory_basis`).
    """

    native_dim: int = 384
    d_model: int = 64
    d_value: int = 32
    num_buckets: int = NUM_BUCKETS
    project_slots: int = PROJECT_SLOTS
    num_features: int = NUM_FEATURES
    gate_hidden: int = 32
    max_tokens: int = MAX_TOKENS
    bilinear_rank: int = 64

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, int]) -> ScorerConfig:
        return cls(**{k: int(v) for k, v in raw.items() if k in cls.__dataclass_fields__})

    @property
    def gate_inputs(self) -> int:
        """attention logit, cosine, project interaction, value alignment, value, features."""
        return 4 + self.d_value + self.num_features


class MemoryScorer(nn.Module):
    """Scores each candidate memory of each session; higher = more likely to help.

    Args:
        config: the hyper-parameters.
        seed: initialisation seed; the same seed gives bit-identical weights (the global
            torch RNG is left untouched).
    """

    # Buffers (register_buffer in __init__), declared so type checkers read them as tensors.
    memory_basis: torch.Tensor
    anchor: torch.Tensor
    anchor_on: torch.Tensor

    def __init__(self, config: ScorerConfig | None = None, *, seed: int = 0) -> None:
        super().__init__()
        self.config = cfg = config or ScorerConfig()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            # Two encoding paths into the shared d-space, each with its own LayerNorm (seed "Path normalization").
            self.down_projection = nn.Linear(cfg.native_dim, cfg.d_model)
            self.norm_embedded = nn.LayerNorm(cfg.d_model)
            self.text_embedding = nn.EmbeddingBag(
                cfg.num_buckets + 1, cfg.d_model, mode="mean", padding_idx=PAD_TOKEN_ID
            )
            self.norm_text = nn.LayerNorm(cfg.d_model)
            self.query = nn.Linear(cfg.d_model, cfg.d_model)
            self.key = nn.Linear(cfg.d_model, cfg.d_model)
            self.value = nn.Linear(cfg.d_model, cfg.d_value)
            self.project_embedding = nn.Embedding(cfg.project_slots, cfg.d_model)
            self.gate_hidden = nn.Linear(cfg.gate_inputs, cfg.gate_hidden)
            self.gate_out = nn.Linear(cfg.gate_hidden, 1)
            self.gate_linear = nn.Linear(cfg.gate_inputs, 1)
            # The context x memory bilinear term (docs/predictor.md, "Bilinear term"):
            # (c B) W (m B)^T for an embedded context c and candidate m, in the subspace of
            # the user's own memory vectors spanned by ``memory_basis`` ([E, r], orthonormal
            # columns, set from the training candidates; zeros: no subspace yet, term 0).
            # W starts at 0, so an untrained or older model scores as it did without it.
            self.register_buffer("memory_basis", torch.zeros(cfg.native_dim, cfg.bilinear_rank))
            self.context_bilinear = nn.Parameter(torch.zeros(cfg.bilinear_rank, cfg.bilinear_rank))
            # Baseline prior with a zero-initialised residual: the untrained model scores
            # exactly BASELINE_PRIOR . (baseline_score, baseline_rank_inv), i.e. ranks as the
            # baseline does (a residual re-ranker over a first-stage score). Every other gate
            # weight and the MLP's output layer start at 0 (ReZero-style: Bachlechner et al.
            # 2020, "ReZero is All You Need"), so training moves away from the baseline only
            # where sessions disagree with it, instead of from random noise, which starts below
            # the baseline and trains to no better than it (docs/predictor.md).
            # The full stage's linear anchor (docs/predictor.md, "Full stage: an ensemble with a
            # linear anchor"): feature weights of a linear-stage model fitted on the same
            # sessions; while ``anchor_on`` is 1, :meth:`score` ranks by the sum of both models'
            # within-session z-scores. Off (0) in the linear stage and in older checkpoints.
            self.register_buffer("anchor", torch.zeros(cfg.num_features))
            self.register_buffer("anchor_on", torch.zeros(()))
            if cfg.num_features == NUM_FEATURES:
                self.gate_linear.weight.data.zero_()
                self.gate_linear.bias.data.zero_()
                self.gate_out.weight.data.zero_()
                self.gate_out.bias.data.zero_()
                self.gate_linear.weight.data[0, self._feature_columns] = baseline_prior_weights()

    def feature_residual_masks(self) -> dict[str, torch.Tensor]:
        """Gradient masks that restrict training to the linear residual over the feature schema.

        The small-data training stage (``docs/predictor.md``, "Linear stage") trains only the
        feature columns of the linear gate: the model is then the baseline prior plus a linear
        correction over :data:`~memlane.predictor.features.FEATURE_NAMES` (a linear ranker on
        the versioned features, Joachims 2002 / Burges et al. 2005), while the attention,
        encoders, value columns and the gate MLP keep their initial values (the MLP's output
        layer and the non-feature gate columns start at 0, so they contribute nothing).

        Returns:
            ``{parameter name: float mask of that parameter's shape}`` (1 = trainable entry):
            ``gate_linear.weight`` (shape ``[1, gate_inputs]``, ones on the last
            ``num_features`` columns) and ``context_bilinear`` (``[r, r]``, all ones: the
            bilinear term, convex in W as the linear residual is in its weights). Parameters
            not named are not trained in that stage.
        """
        mask = torch.zeros_like(self.gate_linear.weight)
        mask[0, self._feature_columns] = 1.0
        return {"gate_linear.weight": mask, "context_bilinear": torch.ones_like(self.context_bilinear)}

    def feature_column_mask(self, columns: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"gate_linear.weight": bool [1, gate_inputs]}``, True at the linear gate's weights
        of the feature columns marked in ``columns`` (bool ``[num_features]``): the form
        :func:`memlane.predictor.train.fit` takes for ``held_at_zero``.

        Raises:
            ValueError: ``columns`` is not ``[num_features]``.
        """
        if tuple(columns.shape) != (self.config.num_features,):
            raise ValueError(f"columns must be [{self.config.num_features}], got {tuple(columns.shape)}")
        mask = torch.zeros(self.gate_linear.weight.shape, dtype=torch.bool)
        mask[0, self._feature_columns] = columns.bool()
        return {"gate_linear.weight": mask}

    def mlp_feature_mask(self, columns: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{"gate_hidden.weight": bool [gate_hidden, gate_inputs]}``, True at the gate MLP's
        input weights of the feature columns marked in ``columns`` (bool ``[num_features]``),
        for every hidden unit: with those weights at 0 the MLP does not see the features (the
        form :func:`memlane.predictor.train.fit` takes for ``held_at_zero``).

        Raises:
            ValueError: ``columns`` is not ``[num_features]``.
        """
        if tuple(columns.shape) != (self.config.num_features,):
            raise ValueError(f"columns must be [{self.config.num_features}], got {tuple(columns.shape)}")
        mask = torch.zeros(self.gate_hidden.weight.shape, dtype=torch.bool)
        mask[:, self._feature_columns] = columns.bool().unsqueeze(0)
        return {"gate_hidden.weight": mask}

    @property
    def _feature_columns(self) -> slice:
        """The linear gate's columns that weigh the versioned features (its last ``num_features``)."""
        return slice(self.config.gate_inputs - self.config.num_features, self.config.gate_inputs)

    def feature_weight_view(self) -> torch.Tensor:
        """The linear gate's feature weights as a differentiable view, float ``[num_features]``
        (for a penalty on them during training; :meth:`feature_weights` is a detached copy)."""
        return self.gate_linear.weight[0, self._feature_columns]

    def feature_weights(self) -> torch.Tensor:
        """A copy of the linear gate's feature weights, float ``[num_features]``: in the linear
        stage the whole model is ``features @ feature_weights()`` plus a constant."""
        return self.gate_linear.weight.detach()[0, self._feature_columns].clone()

    def set_memory_basis(self, basis: torch.Tensor) -> None:
        """Move the bilinear term to a new subspace ``basis`` (float ``[native_dim, r]``,
        orthonormal or zero columns), carrying W over: ``W' = R W R^T`` with ``R = basis^T
        B_old``, the old bilinear form's projection onto the new subspace (exact where the two
        subspaces agree; W' = 0 from a zero basis).

        Raises:
            ValueError: ``basis`` of another shape, or not finite.
        """
        b = basis.detach().to(self.memory_basis.dtype)
        if b.shape != self.memory_basis.shape or not bool(torch.isfinite(b).all()):
            raise ValueError(f"memory basis must be {tuple(self.memory_basis.shape)} and finite, got {tuple(b.shape)}")
        with torch.no_grad():
            r = b.T @ self.memory_basis  # [r, r]
            self.context_bilinear.copy_(r @ self.context_bilinear @ r.T)
            self.memory_basis.copy_(b)

    def bilinear_scores(self, batch: SessionBatch) -> torch.Tensor:
        """The bilinear term ``(c B) W (m B)^T`` per candidate, float ``[B, N]``; 0 where the
        context or the candidate has no embedding (the text path has no such term) and at padding.

        Computed as ``m . q``: the context is mapped to ``q = c B W B^T`` ([B, E]) and
        each candidate's embedding is dotted with it, so a step costs ``B*N*E`` multiply-adds,
        not ``B*N*E*r``.
        """
        basis = self.memory_basis
        q = ((batch.context_embedding @ basis) @ self.context_bilinear) @ basis.T  # [B, E]
        term = torch.einsum("be,bne->bn", q, batch.candidate_embeddings)
        valid = batch.candidate_is_embedded & batch.mask & batch.context_is_embedded.unsqueeze(-1)
        return term.masked_fill(~valid, 0.0)

    def count_parameters(self) -> int:
        """Number of trainable scalars (seed budget: under 2M)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def encode(self, embeddings: torch.Tensor, tokens: torch.Tensor, is_embedded: torch.Tensor) -> torch.Tensor:
        """Project items into the shared ``d`` space by their own path.

        Args:
            embeddings: float ``[*lead, native_dim]`` (ignored where not embedded).
            tokens: int64 ``[*lead, T]`` HashTrick ids, PAD = 0 (mean-pooled; all-PAD -> 0).
            is_embedded: bool ``[*lead]``: True takes the embedding path.

        Returns:
            float ``[*lead, d_model]``, LayerNorm-ed per path.

        The text path runs only on the items that take it (none, usually: a memory with a
        stored embedding is scored from it). The output is the same as running both paths
        on every item and selecting; the hash-bucket table then gets no gradient from a batch
        without text items, instead of a dense all-zero one (16,385 x 64) whose clip and Adam
        update would cost a large share of every step (docs/decisions.md, "Training").
        """
        lead = is_embedded.shape
        d = self.config.d_model
        dense = self.norm_embedded(self.down_projection(embeddings))  # [*lead, d]
        if bool(is_embedded.all()):
            return dense
        flat = ~is_embedded.reshape(-1)  # [M] items on the text path
        rows = flat.nonzero().squeeze(1)  # [m]
        text = self.norm_text(self.text_embedding(tokens.reshape(-1, tokens.shape[-1])[rows]))  # [m, d]
        placed = dense.new_zeros(flat.shape[0], d).index_put((rows,), text)  # [M, d]
        return torch.where(is_embedded.unsqueeze(-1), dense, placed.reshape(*lead, d))

    def forward(self, batch: SessionBatch) -> torch.Tensor:
        """Score a padded batch of sessions.

        Args:
            batch: a :class:`SessionBatch` with ``B`` sessions of up to ``N`` candidates.

        Returns:
            float32 scores ``[B, N]`` (unbounded logits; 0.0 at padded slots). Only the order
            within a session is meaningful (the model is trained with a listwise loss).
        """
        d = self.config.d_model
        ctx = self.encode(batch.context_embedding, batch.context_tokens, batch.context_is_embedded)  # [B, d]
        # Padded slots take the embedding path (all-zero input): their encodings never reach a
        # score (masked logits, zero attention weight, masked output), and the text path is skipped.
        cand = self.encode(
            batch.candidate_embeddings, batch.candidate_tokens, batch.candidate_is_embedded | ~batch.mask
        )  # [B, N, d]
        q = self.query(ctx)  # [B, d]
        k = self.key(cand)  # [B, N, d]
        v = self.value(cand)  # [B, N, d_value]
        # Scaled dot-product attention logits q.k / sqrt(d) (seed diagram; Vaswani et al. 2017).
        attn_logit = torch.einsum("bd,bnd->bn", q, k) / d**0.5
        cosine = F.cosine_similarity(cand, ctx.unsqueeze(1).expand_as(cand), dim=-1, eps=1e-6)
        project = self.project_embedding(batch.project_slots)  # [B, d]
        project_interaction = torch.einsum("bd,bnd->bn", project, k) / d**0.5
        # ACAN's attended memory summary; each candidate's value is compared with it.
        weights = torch.softmax(attn_logit.masked_fill(~batch.mask, _MASKED_LOGIT), dim=-1)
        summary = torch.einsum("bn,bnv->bv", weights, v)  # [B, d_value]
        value_alignment = torch.einsum("bv,bnv->bn", summary, v) / self.config.d_value**0.5
        gate_in = torch.cat(
            [
                attn_logit.unsqueeze(-1),
                cosine.unsqueeze(-1),
                project_interaction.unsqueeze(-1),
                value_alignment.unsqueeze(-1),
                v,
                batch.features,
            ],
            dim=-1,
        )  # [B, N, gate_inputs]
        score = self.gate_out(F.gelu(self.gate_hidden(gate_in))) + self.gate_linear(gate_in)
        return (score.squeeze(-1) + self.bilinear_scores(batch)).masked_fill(~batch.mask, 0.0)

    def set_anchor(self, weights: torch.Tensor | None) -> None:
        """Turn the linear anchor on with ``weights`` (float ``[num_features]``), or off (None).

        Raises:
            ValueError: ``weights`` of another shape, or not finite.
        """
        with torch.no_grad():
            if weights is None:
                self.anchor.zero_()
                self.anchor_on.zero_()
                return
            w = weights.detach().to(self.anchor.dtype).reshape(-1)
            if w.shape != self.anchor.shape or not bool(torch.isfinite(w).all()):
                raise ValueError(f"anchor weights must be {tuple(self.anchor.shape)} and finite, got {tuple(w.shape)}")
            self.anchor.copy_(w)
            self.anchor_on.fill_(1.0)

    @property
    def has_anchor(self) -> bool:
        """True while :meth:`score` ranks by the ensemble with the linear anchor."""
        return bool(self.anchor_on.item() > 0)

    def score(self, batch: SessionBatch) -> torch.Tensor:
        """The ranking scores ``[B, N]``, without autograd (``torch.inference_mode``).

        Without an anchor: :meth:`forward`. With one (the full stage): the sum of the
        within-session z-scores of :meth:`forward` and of the linear anchor ``features @
        anchor`` (mean and standard deviation over each session's real candidates; a score
        constant within a session contributes 0). Padded slots are 0. This is what
        validation, the gates and serving rank by; training fits :meth:`forward` alone.
        """
        with torch.inference_mode():
            full = self(batch)
            if not self.has_anchor:
                return full
            linear = torch.einsum("bnf,f->bn", batch.features, self.anchor)
            return (_within_session_z(full, batch.mask) + _within_session_z(linear, batch.mask)).masked_fill(
                ~batch.mask, 0.0
            )


def _within_session_z(scores: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``(x - mean) / (std + 1e-6)`` per row of ``scores [B, N]`` over ``mask [B, N]`` (population std)."""
    m = mask.to(scores.dtype)
    n = m.sum(-1, keepdim=True).clamp_min(1.0)
    mean = (scores * m).sum(-1, keepdim=True) / n
    var = (((scores - mean) * m) ** 2).sum(-1, keepdim=True) / n
    return (scores - mean) / (var.sqrt() + 1e-6)


def configure_threads(num_threads: int = 1) -> None:
    """Pin torch's CPU thread pools for the daemon.

    One thread by default: a slate of ~100 candidates is a handful of 64x64 matmuls, where
    handing work to a second intra-op thread costs more than it saves; the daemon already
    runs HTTP workers and the ONNX embedder's own pool on the same cores, so more torch
    threads only add contention and jitter to session-start latency. Call once at startup,
    before any torch work (the inter-op pool can be sized only once per process).

    Args:
        num_threads: intra-op threads, >= 1.
    """
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    torch.set_num_threads(num_threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already sized, or parallel work already started
        pass
