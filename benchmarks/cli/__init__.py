"""The ``memlane bench`` and ``memlane replay`` command groups.

Importing this package registers every bench command on :data:`bench_app` (one module per
family); :mod:`memlane.cli.lazy` loads it when one of these commands runs.
"""

from __future__ import annotations

from benchmarks.cli import dashboard, drift, pipeline, predictor, prefetch  # noqa: F401  (register commands)
from benchmarks.cli.bench import bench_app
from benchmarks.cli.replay import replay_app

__all__ = ["bench_app", "replay_app"]
