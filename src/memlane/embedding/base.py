"""The :class:`Embedder` protocol and the helpers every provider shares.

An embedder turns texts into float32 row vectors of unit L2 norm. Every vector is
stored with the embedder's ``model_id``; vectors from different model ids are never
compared. :class:`HttpEmbedder` is the common part of the HTTP providers
(``ollama``, ``openai_compat``): one POST per call, errors mapped to
:class:`memlane.errors.EmbeddingError`, reply validated and normalised.
"""

from __future__ import annotations

import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from memlane.errors import EmbeddingError
from memlane.httpjson import JsonHttpClient


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors.

    Attributes:
        model_id: stable id recorded with every vector (e.g. ``"all-MiniLM-L6-v2-onnx-int8"``);
            vectors from different model ids are never compared.
        dimensions: vector size; an HTTP provider may report 0 until its first reply.
    """

    model_id: str
    dimensions: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts``.

        Returns:
            float32 array of shape ``[len(texts), dimensions]`` with L2-normalised rows,
            in the order of ``texts``; ``[0, dimensions]`` for an empty input.

        Raises:
            EmbeddingError: the provider failed or replied with something unusable.
        """
        ...

    def close(self) -> None:
        """Release sessions and connections; the embedder is not used afterwards."""
        ...


def empty_matrix(dimensions: int) -> np.ndarray:
    """A float32 array of shape ``[0, dimensions]``."""
    return np.zeros((0, dimensions), dtype=np.float32)


class HttpEmbedder(ABC):
    """Common part of the HTTP providers; subclasses set the URL, the payload and the parser.

    Args:
        model_id: the id recorded with the vectors.
        url: the endpoint to POST to.
        model: the model name sent in the payload.
        timeout_s: connect/read/write timeout, seconds.
        dimensions: expected vector size; 0 = learn it from the first reply.
        headers: extra request headers (e.g. ``Authorization``).

    Thread-safe: the keep-alive pool is shared; learning ``dimensions`` is locked.
    """

    provider = "http"

    def __init__(
        self,
        *,
        model_id: str,
        url: str,
        model: str,
        timeout_s: float,
        dimensions: int,
        headers: dict[str, str] | None = None,
    ) -> None:
        if dimensions < 0:
            raise ValueError("dimensions must be >= 0")
        self.model_id = model_id
        self.model = model
        self.url = url
        self.timeout_s = check_finite_timeout(timeout_s)
        self.dimensions = int(dimensions)
        self._lock = threading.Lock()
        self._client = JsonHttpClient(headers=headers)

    # -- to override ------------------------------------------------------

    def _payload(self, texts: list[str]) -> dict[str, Any]:
        return {"model": self.model, "input": texts}

    @abstractmethod
    def _vectors(self, reply: Any) -> list[Any]:
        """The list of vectors in a decoded JSON reply, in input order; raise via ``_fail``."""

    # -- shared -----------------------------------------------------------

    def _fail(self, message: str, **details: Any) -> EmbeddingError:
        return EmbeddingError(
            f"{self.model_id}: {message}",
            details={"provider": self.provider, "model_id": self.model_id, "url": self.url, **details},
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embed ``texts`` with one POST.

        Returns:
            float32 array ``[len(texts), dimensions]``, unit-norm rows, input order.

        Raises:
            EmbeddingError: timeout (message names the timeout in seconds), connection
                failure, HTTP status >= 400 (message has the status and the first 200
                characters of the body), a reply that is not JSON, has the wrong shape,
                the wrong number of vectors, inconsistent or unexpected dimensions,
                non-finite values or a zero vector.
        """
        texts = list(texts)
        if not texts:
            return empty_matrix(self.dimensions)
        reply = self._client.post_json(
            self.url,
            self._payload(texts),
            timeout_s=self.timeout_s,
            fail=lambda message, timed_out, **details: self._fail(message, **details),
        )
        return self._to_matrix(self._vectors(reply), len(texts))

    def _to_matrix(self, vectors: list[Any], expected_rows: int) -> np.ndarray:
        if len(vectors) != expected_rows:
            raise self._fail(f"asked for {expected_rows} vectors, the reply has {len(vectors)}")
        width = None
        for i, vec in enumerate(vectors):
            if not isinstance(vec, list) or not vec:
                raise self._fail(f"vector {i} is not a non-empty list of numbers")
            if width is None:
                width = len(vec)
            elif len(vec) != width:
                raise self._fail(
                    f"inconsistent dimensions in one reply: vector 0 has {width}, vector {i} has {len(vec)}"
                )
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vec):
                raise self._fail(f"vector {i} holds a value that is not a number")
        assert width is not None
        with self._lock:
            if self.dimensions == 0:
                self.dimensions = width
            elif width != self.dimensions:
                raise self._fail(f"expected {self.dimensions} dimensions, the reply has {width}")
        matrix = np.asarray(vectors, dtype=np.float64)
        if not np.all(np.isfinite(matrix)):
            raise self._fail("the reply holds NaN or infinite values")
        norms = np.linalg.norm(matrix, axis=1)
        if np.any(norms == 0) or not np.all(np.isfinite(norms)):
            raise self._fail(f"the reply holds a zero vector (row {int(np.argmin(norms))})")
        return (matrix / norms[:, None]).astype(np.float32)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r}, url={self.url!r})"


def check_finite_timeout(timeout_s: float) -> float:
    """``timeout_s`` as a float, if it is finite and > 0; else ValueError."""
    value = float(timeout_s)
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"timeout_s must be a finite number > 0, got {timeout_s!r}")
    return value
