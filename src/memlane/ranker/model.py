"""The learned ranker's model file: a LightGBM lambdarank booster with its feature schema.

File format (version :data:`FORMAT_VERSION`), gzip-compressed UTF-8:

    line 1: a JSON header {"format": 1, "schema_version": int, "features": [names...],
            "embedding_model": str | null, "trained_on": [conversation ids], "created_at": iso,
            "params": {...}, "pool_size": int, ...}
    rest:   LightGBM's own text model (``Booster.model_to_string``)

:func:`load` refuses a file whose format, schema version or feature names differ from this
code's (:data:`memlane.ranker.features.FEATURES`) with :class:`RankerSchemaError`, the way the
predictor refuses an old checkpoint: a model scores columns by position, so a renamed or
reordered feature would be silently wrong.

The model trained on all ten LoCoMo conversations ships as :data:`SHIPPED_MODEL` inside the
package and loads offline.
"""

from __future__ import annotations

import gzip
import json
import threading
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

import numpy as np

from memlane.ranker import features as F

#: Version of the file layout.
FORMAT_VERSION = 1
#: The model shipped inside the package (trained on all ten LoCoMo conversations).
SHIPPED_MODEL = Path(__file__).with_name("data") / "ranker-locomo.lgb.gz"


class RankerSchemaError(ValueError):
    """The model file was written for another feature schema or file format."""


@dataclass
class RankerModel:
    """A loaded model: the booster and the header it was saved with."""

    booster: Any  # lightgbm.Booster
    header: dict[str, Any] = field(default_factory=dict)

    @property
    def embedding_model(self) -> str | None:
        """The embedding model whose scores the model was trained on (None: any)."""
        return self.header.get("embedding_model")

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Scores float64 [m] for a feature matrix [m, len(FEATURES)] (higher = better). One
        thread: the daemon's other work needs the other core."""
        if x.shape[0] == 0:
            return np.zeros(0)
        return np.asarray(self.booster.predict(x, num_threads=1), dtype=np.float64)


def header_for(
    *, trained_on: list[str], embedding_model: str | None, params: dict[str, Any], extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The header :func:`save` writes for a model trained now on ``trained_on``."""
    from datetime import datetime

    return {
        "format": FORMAT_VERSION,
        "schema_version": F.SCHEMA_VERSION,
        "features": list(F.FEATURES),
        "embedding_model": embedding_model,
        "trained_on": list(trained_on),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "params": params,
        **(extra or {}),
    }


def save(path: Path, booster: Any, header: dict[str, Any]) -> Path:
    """Write ``booster`` with ``header`` to ``path`` (gzip; parents created). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps(header, sort_keys=True) + "\n" + booster.model_to_string()
    tmp = path.with_name(path.name + ".tmp")
    # no name, mtime 0: the same model gives the same bytes
    with open(tmp, "wb") as raw, gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz:
        gz.write(body.encode("utf-8"))
    tmp.replace(path)
    return path


def read_header(path: Path) -> dict[str, Any]:
    """The header of a model file.

    Raises:
        OSError: unreadable; RankerSchemaError: not a model file.
    """
    with gzip.open(path, "rt", encoding="utf-8") as f:
        line = f.readline()
    try:
        header = json.loads(line)
    except ValueError as exc:
        raise RankerSchemaError(f"{path}: not a ranker model file") from exc
    if not isinstance(header, dict):
        raise RankerSchemaError(f"{path}: not a ranker model file")
    return header


def check_header(header: dict[str, Any], where: str = "model") -> None:
    """Refuse a header written for another file format or feature schema.

    Raises:
        RankerSchemaError: naming what differs.
    """
    if header.get("format") != FORMAT_VERSION:
        raise RankerSchemaError(f"{where}: file format {header.get('format')!r}, this memlane reads {FORMAT_VERSION}")
    if header.get("schema_version") != F.SCHEMA_VERSION:
        raise RankerSchemaError(
            f"{where}: feature schema v{header.get('schema_version')}, this memlane computes "
            f"v{F.SCHEMA_VERSION}; retrain with `memlane train ranker`"
        )
    if list(header.get("features") or []) != list(F.FEATURES):
        raise RankerSchemaError(
            f"{where}: its feature names differ from schema v{F.SCHEMA_VERSION}'s; retrain with `memlane train ranker`"
        )


def load(path: Path) -> RankerModel:
    """Load and check a model file.

    Raises:
        OSError: unreadable; RankerSchemaError: another format or feature schema.
    """
    import lightgbm as lgb

    path = Path(path)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        text = f.read()
    first, _, body = text.partition("\n")
    try:
        header = json.loads(first)
    except ValueError as exc:
        raise RankerSchemaError(f"{path}: not a ranker model file") from exc
    if not isinstance(header, dict):
        raise RankerSchemaError(f"{path}: not a ranker model file")
    check_header(header, str(path))
    booster = lgb.Booster(model_str=body)
    if booster.num_feature() != len(F.FEATURES):
        raise RankerSchemaError(
            f"{path}: the booster reads {booster.num_feature()} features, the schema has {len(F.FEATURES)}"
        )
    return RankerModel(booster, header)


_cache: dict[tuple[str, int, int], RankerModel] = {}
_cache_lock = threading.Lock()


def load_cached(path: Path) -> RankerModel:
    """:func:`load` once per file version (path, size, mtime) per process: every store of a
    process (tests, benches) shares the parsed booster, which is read-only.

    Raises:
        as :func:`load`.
    """
    st = Path(path).stat()
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    with _cache_lock:
        got = _cache.get(key)
    if got is None:
        got = load(path)
        with _cache_lock:
            _cache[key] = got
    return got
