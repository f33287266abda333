"""Training/scoring examples and the collate function that pads them into a batch.

A :class:`Session` is one listwise example (seed "Training Signals" -> "Training data
format"): the session context, its candidate memories, their feature rows and labels.
:func:`collate` pads a list of sessions to the batch's longest slate; padded label slots
hold :data:`~memlane.predictor.padding.PADDED_Y_VALUE`.

Sessions validate shapes, not values: a NaN label or feature passes through on purpose so
the "all losses finite" gate of :func:`memlane.predictor.train.fit` rejects the run
(feature rows built by :func:`~memlane.predictor.features.build_feature_matrix` are
already checked).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from memlane.predictor.features import NUM_FEATURES
from memlane.predictor.padding import PADDED_Y_VALUE
from memlane.predictor.tokenizer import MAX_TOKENS, PAD_TOKEN_ID, project_slot, token_ids

__all__ = ["Session", "SessionBatch", "batched", "collate", "memory_basis", "session_constant_columns"]


@dataclass(frozen=True)
class Session:
    """One session's candidate slate (a listwise training or scoring example).

    Attributes:
        features: float array ``[n, NUM_FEATURES]`` from ``build_feature_matrix``.
        labels: float array ``[n]`` in ``[-1, 1]`` (seed "Training Signals"); ``None`` to
            score only (collated as 0).
        candidate_texts: ``n`` memory texts, or empty when every candidate is embedded.
        candidate_embeddings: float array ``[n, native_dim]`` or ``None``; rows of
            candidates that are not embedded are ignored (may be zeros).
        candidate_is_embedded: bool array ``[n]``; default: all True when
            ``candidate_embeddings`` is given, else all False.
        context_embedding: float array ``[native_dim]`` of the session context, or ``None``
            to use ``context_text``.
        context_text: the session context (prompt, recent transcript), used without an
            embedding.
        confidence: weight of the session in the loss, ``[0, 1]`` (continuity-scorer
            confidence).
        project: project name (hashed to one of 32 project slots).
        session_id: free-form id for logs.

    Raises:
        ValueError: from ``__post_init__`` on inconsistent shapes or an empty slate.
    """

    features: np.ndarray
    labels: np.ndarray | None = None
    candidate_texts: Sequence[str] = ()
    candidate_embeddings: np.ndarray | None = None
    candidate_is_embedded: np.ndarray | None = None
    context_embedding: np.ndarray | None = None
    context_text: str = ""
    confidence: float = 1.0
    project: str | None = None
    session_id: str = ""

    def __post_init__(self) -> None:
        n = self.num_candidates
        if self.features.ndim != 2 or self.features.shape[1] != NUM_FEATURES or n == 0:
            raise ValueError(f"features must be [n>=1, {NUM_FEATURES}], got {tuple(self.features.shape)}")
        if self.labels is not None and tuple(self.labels.shape) != (n,):
            raise ValueError(f"labels must be [{n}], got {tuple(self.labels.shape)}")
        if self.candidate_texts and len(self.candidate_texts) != n:
            raise ValueError(f"candidate_texts must have {n} entries, got {len(self.candidate_texts)}")
        emb = self.candidate_embeddings
        if emb is not None and (emb.ndim != 2 or emb.shape[0] != n):
            raise ValueError(f"candidate_embeddings must be [{n}, native_dim], got {tuple(emb.shape)}")
        flags = self.candidate_is_embedded
        if flags is not None:
            if tuple(flags.shape) != (n,):
                raise ValueError(f"candidate_is_embedded must be [{n}], got {tuple(flags.shape)}")
            if emb is None and bool(np.any(flags)):
                raise ValueError("candidate_is_embedded is set but candidate_embeddings is None")
        ctx = self.context_embedding
        if ctx is not None and ctx.ndim != 1:
            raise ValueError(f"context_embedding must be [native_dim], got {tuple(ctx.shape)}")

    @property
    def num_candidates(self) -> int:
        return int(self.features.shape[0]) if self.features.ndim >= 1 else 0

    def is_embedded(self) -> np.ndarray:
        """bool array ``[n]``: which candidates take the embedding path."""
        if self.candidate_is_embedded is not None:
            return self.candidate_is_embedded.astype(bool)
        return np.full(self.num_candidates, self.candidate_embeddings is not None)


@dataclass(frozen=True)
class SessionBatch:
    """Sessions padded to one slate length ``N`` (``B`` sessions, ``E`` = native_dim, ``T`` tokens).

    Attributes:
        context_embedding: float32 ``[B, E]`` (zeros where absent).
        context_is_embedded: bool ``[B]``.
        context_tokens: int64 ``[B, T]``, PAD = :data:`PAD_TOKEN_ID`.
        candidate_embeddings: float32 ``[B, N, E]`` (zeros where absent or padded).
        candidate_is_embedded: bool ``[B, N]``.
        candidate_tokens: int64 ``[B, N, T]``.
        features: float32 ``[B, N, NUM_FEATURES]`` (zeros at padding).
        project_slots: int64 ``[B]`` in ``[0, 32)``.
        mask: bool ``[B, N]``, True at real candidates.
        labels: float32 ``[B, N]``, :data:`PADDED_Y_VALUE` at padding.
        confidence: float32 ``[B]``.
    """

    context_embedding: torch.Tensor
    context_is_embedded: torch.Tensor
    context_tokens: torch.Tensor
    candidate_embeddings: torch.Tensor
    candidate_is_embedded: torch.Tensor
    candidate_tokens: torch.Tensor
    features: torch.Tensor
    project_slots: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor
    confidence: torch.Tensor
    session_ids: tuple[str, ...] = field(default=())

    @property
    def batch_size(self) -> int:
        return int(self.mask.shape[0])


def collate(sessions: Sequence[Session], *, native_dim: int, max_tokens: int = MAX_TOKENS) -> SessionBatch:
    """Pad sessions into a :class:`SessionBatch` (slate length = the longest session's).

    Args:
        sessions: at least one :class:`Session`.
        native_dim: width ``E`` of the embedding model's vectors (e.g. 384).
        max_tokens: token cap per text.

    Returns:
        the padded batch; see :class:`SessionBatch` for shapes.

    Raises:
        ValueError: no sessions, or an embedding whose width is not ``native_dim``.
    """
    if not sessions:
        raise ValueError("collate needs at least one session")
    b, n = len(sessions), max(s.num_candidates for s in sessions)
    ctx_emb = np.zeros((b, native_dim), dtype=np.float32)
    ctx_is_emb = np.zeros(b, dtype=bool)
    cand_emb = np.zeros((b, n, native_dim), dtype=np.float32)
    cand_is_emb = np.zeros((b, n), dtype=bool)
    feats = np.zeros((b, n, NUM_FEATURES), dtype=np.float32)
    labels = np.full((b, n), PADDED_Y_VALUE, dtype=np.float32)
    mask = np.zeros((b, n), dtype=bool)
    ctx_tokens: list[list[int]] = []
    cand_tokens: list[list[list[int]]] = []
    for i, s in enumerate(sessions):
        k = s.num_candidates
        if s.context_embedding is not None:
            _check_width(s.context_embedding.shape[-1], native_dim, s, "context_embedding")
            ctx_emb[i] = s.context_embedding
            ctx_is_emb[i] = True
        if s.candidate_embeddings is not None:
            _check_width(s.candidate_embeddings.shape[-1], native_dim, s, "candidate_embeddings")
            cand_emb[i, :k] = s.candidate_embeddings
        cand_is_emb[i, :k] = s.is_embedded()
        feats[i, :k] = s.features
        labels[i, :k] = 0.0 if s.labels is None else s.labels
        mask[i, :k] = True
        ctx_tokens.append(token_ids(s.context_text, max_tokens))
        cand_tokens.append([token_ids(t, max_tokens) for t in s.candidate_texts])
    width = max([1, *(len(t) for t in ctx_tokens), *(len(t) for row in cand_tokens for t in row)])
    ctx_ids = np.full((b, width), PAD_TOKEN_ID, dtype=np.int64)
    cand_ids = np.full((b, n, width), PAD_TOKEN_ID, dtype=np.int64)
    for i, ids in enumerate(ctx_tokens):
        ctx_ids[i, : len(ids)] = ids
        for j, cids in enumerate(cand_tokens[i]):
            cand_ids[i, j, : len(cids)] = cids
    return SessionBatch(
        context_embedding=torch.from_numpy(ctx_emb),
        context_is_embedded=torch.from_numpy(ctx_is_emb),
        context_tokens=torch.from_numpy(ctx_ids),
        candidate_embeddings=torch.from_numpy(cand_emb),
        candidate_is_embedded=torch.from_numpy(cand_is_emb),
        candidate_tokens=torch.from_numpy(cand_ids),
        features=torch.from_numpy(feats),
        project_slots=torch.tensor([project_slot(s.project) for s in sessions], dtype=torch.long),
        mask=torch.from_numpy(mask),
        labels=torch.from_numpy(labels),
        confidence=torch.tensor([float(s.confidence) for s in sessions], dtype=torch.float32),
        session_ids=tuple(s.session_id for s in sessions),
    )


def batched(
    sessions: Sequence[Session], *, batch_size: int, native_dim: int, max_tokens: int = MAX_TOKENS
) -> list[SessionBatch]:
    """Collate consecutive groups of ``batch_size`` sessions (the last group may be smaller).

    Raises:
        ValueError: ``batch_size < 1``, or as :func:`collate`.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return [
        collate(sessions[i : i + batch_size], native_dim=native_dim, max_tokens=max_tokens)
        for i in range(0, len(sessions), batch_size)
    ]


def _check_width(width: int, native_dim: int, session: Session, name: str) -> None:
    if width != native_dim:
        raise ValueError(f"session {session.session_id!r}: {name} has width {width}, expected {native_dim}")


def session_constant_columns(batches: Sequence[SessionBatch]) -> torch.Tensor:
    """Feature columns that take one value within each session of every batch.

    A listwise loss is invariant to adding the same amount to every score of a session, so a
    linear weight on such a column cannot change a ranking: its exact gradient is 0, its
    computed one is rounding noise (~1e-9). The time-of-day, weekday, month and session-gap
    columns are constant within any session by construction; ``is_embedded`` is when every
    candidate has a vector. (Used by the linear stage and the linear anchor, which hold these
    weights at 0: see :func:`memlane.predictor.train.fit`'s ``held_at_zero``.)

    Args:
        batches: collated batches (features ``[B, N, F]``, mask ``[B, N]``); padding ignored.

    Returns:
        bool ``[F]``: True where no session of ``batches`` holds two different values. All
        True when ``batches`` is empty or has no candidates.

    Raises:
        ValueError: the batches disagree on the number of feature columns.
    """
    if not batches:
        return torch.ones(NUM_FEATURES, dtype=torch.bool)
    width = batches[0].features.shape[-1]
    varies = torch.zeros(width, dtype=torch.bool)
    for b in batches:
        if b.features.shape[-1] != width:
            raise ValueError(f"batches have {width} and {b.features.shape[-1]} feature columns")
        real = b.mask.unsqueeze(-1)
        hi = b.features.masked_fill(~real, float("-inf")).amax(1)
        lo = b.features.masked_fill(~real, float("inf")).amin(1)
        varies |= (hi > lo).any(0)
    return ~varies


def memory_basis(batches: Sequence[SessionBatch], rank: int, native_dim: int) -> torch.Tensor:
    """The leading principal directions of the training candidates' embeddings.

    The bilinear term's subspace (docs/predictor.md, "Bilinear term"): the top ``rank`` right
    singular vectors of the distinct embedded candidate vectors of ``batches``, centred (PCA).
    A random projection of the same width loses most of the gain this one keeps
    (docs/predictor.md, "Bilinear term").

    Args:
        batches: collated batches (``candidate_embeddings [B, N, E]``, ``candidate_is_embedded``,
            ``mask``); padded and unembedded slots ignored, repeated vectors counted once.
        rank: columns ``r`` of the basis.
        native_dim: ``E``.

    Returns:
        float32 ``[E, rank]`` with orthonormal columns; columns beyond the data's rank (fewer
        than ``rank + 1`` distinct vectors) are 0, and all are 0 without any embedded candidate.
    """
    rows: dict[bytes, np.ndarray] = {}
    for b in batches:
        real = (b.candidate_is_embedded & b.mask).reshape(-1)
        for v in b.candidate_embeddings.reshape(-1, b.candidate_embeddings.shape[-1])[real].numpy():
            rows.setdefault(v.tobytes(), v)
    basis = torch.zeros(native_dim, rank)
    if len(rows) < 2:
        return basis
    x = np.stack(list(rows.values())).astype(np.float64)
    _, sv, vt = np.linalg.svd(x - x.mean(0), full_matrices=False)
    k = min(rank, int((sv > sv[0] * 1e-6).sum()))
    basis[:, :k] = torch.from_numpy(vt[:k].T.astype(np.float32))
    return basis
