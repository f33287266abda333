"""The learned reranking stage of recall.

After the heuristic ranking (hybrid merge, graph boost, rehearsal/recency boosts, dampening,
``min_score``) the best :attr:`~memlane.config.RecallSettings.ranker_pool` candidates (100)
are rescored by the LightGBM model (:mod:`memlane.ranker.model`) over the features of
:mod:`memlane.ranker.features` and reordered by its score; the hits keep their heuristic
``score`` and get the model's as ``rank_score``. The recall answers which ranker ordered it.

The stage runs only when its features are available; otherwise the heuristic order stands
and the reason is reported (:meth:`LearnedRanker.reason_off`):

* ``recall.ranker`` is ``heuristic`` (setting, or the request's ``ranker``), or the request
  sets ``alpha`` without asking for ``ranker: learned`` (it asked for a heuristic blend);
* the model file is missing, unreadable or of another feature schema (refused, logged once);
* the vector leg did not run (no embedder, alpha 0) or the store's embedding model is not the
  one the model was trained on: the vector features would mean something else;
* the pool holds fewer than :data:`MIN_POOL` candidates (a small store).

Never raises into recall: a failure keeps the heuristic order.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from memlane.ranker import features as F
from memlane.ranker.model import SHIPPED_MODEL, RankerModel, load_cached

log = logging.getLogger(__name__)

LEARNED = "learned"
HEURISTIC = "heuristic"
#: Fewest candidates the learned stage reorders: the model was trained on pools of 100 from
#: stores of 369-688 memories; its rank, gap and co-occurrence features mean something else in
#: a pool of a handful (a small store keeps the heuristic order).
MIN_POOL = 50
#: Rerank timings kept (ms), for benchmarks and status.
TIMING_SAMPLES = 1000


class LearnedRanker:
    """The model and its feature cache for one store.

    Args:
        settings: returns the current ``recall`` settings (``ranker``, ``ranker_pool``,
            ``ranker_model``; read per call).
        model_path: use this model file instead of the settings' (tests, cross-validation).
    """

    def __init__(self, settings: Callable[[], Any], model_path: Path | None = None) -> None:
        self.settings = settings
        self.model_path = model_path
        self.cache = F.TextCache()
        self._lock = threading.Lock()
        self._loaded: tuple[Path, RankerModel | None, str | None] | None = None
        #: recent feature + prediction durations, ms
        self.timings: deque[float] = deque(maxlen=TIMING_SAMPLES)

    def path(self) -> Path:
        """The model file in use: ``model_path``, else ``recall.ranker_model``, else the shipped one."""
        if self.model_path is not None:
            return self.model_path
        configured = getattr(self.settings(), "ranker_model", "") or ""
        return Path(configured).expanduser() if configured else SHIPPED_MODEL

    def model(self) -> tuple[RankerModel | None, str | None]:
        """(model, None) or (None, why it could not be loaded). Loads once per path."""
        path = self.path()
        with self._lock:
            if self._loaded is not None and self._loaded[0] == path:
                return self._loaded[1], self._loaded[2]
        try:
            got: tuple[RankerModel | None, str | None] = (load_cached(path), None)
        except FileNotFoundError:
            got = (None, f"model file not found: {path}")
        except Exception as exc:  # schema mismatch, corrupt file, lightgbm missing
            got = (None, f"model refused: {exc}")
            log.warning("learned ranker off: %s", exc)
        with self._lock:
            self._loaded = (path, got[0], got[1])
        return got

    def wanted(self, requested: str | None) -> bool:
        """Whether the learned ranker is asked for (the request's choice, else the setting)."""
        choice = requested or getattr(self.settings(), "ranker", HEURISTIC)
        return choice == LEARNED

    def reason_off(
        self, requested: str | None, embedding_model: str | None, vector_ran: bool, alpha_given: bool = False
    ) -> str | None:
        """None when the stage can run for this recall, else why not. A request that sets
        ``alpha`` (and does not ask for the learned ranker) gets the heuristic blend it asked for."""
        if not self.wanted(requested):
            return "heuristic requested"
        if alpha_given and requested != LEARNED:
            return "alpha given: the heuristic blend was asked for"
        model, why = self.model()
        if model is None:
            return why
        if not vector_ran:
            return "vector leg did not run"
        if model.embedding_model is not None and model.embedding_model != embedding_model:
            return f"embedding model {embedding_model!r} is not the model's {model.embedding_model!r}"
        return None

    def pool_size(self) -> int:
        """Candidates rescored (``recall.ranker_pool``)."""
        return int(getattr(self.settings(), "ranker_pool", 100))

    def score(self, query: str, pool: F.Pool) -> np.ndarray | None:
        """Model scores float64 [len(pool)], or None when it failed (logged)."""
        model, _ = self.model()
        if model is None:
            return None
        t0 = time.perf_counter()
        try:
            out = model.predict(F.compute(query, pool, self.cache))
        except Exception as exc:
            log.warning("learned ranker failed, heuristic order kept: %s", exc)
            return None
        self.timings.append((time.perf_counter() - t0) * 1000)
        return out

    def close(self) -> None:
        """Release the feature cache's tokenizer."""
        self.cache.close()
