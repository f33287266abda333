"""Prometheus exposition of the daemon's observability (``GET /metrics``, prometheus-client).

Collected at scrape time from the hub and one health report (no global registry, so several
daemons or test apps in one process never share series):

* ``memlane_operation_duration_seconds{operation}``: histogram of every timed operation;
* ``memlane_errors_total{stage}``: errors recorded in the error ring since start;
* ``memlane_health_score{domain}`` and ``memlane_health_overall``: diagnostics in [0, 1];
* ``memlane_memories{state}``, ``memlane_jobs{state}``: store counts;
* ``memlane_predictor_alpha``, ``memlane_predictor_success_rate``,
  ``memlane_predictor_model_version``, ``memlane_predictor_sidecar_up`` (when it runs).
"""

from __future__ import annotations

import math
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from memlane.observability.diagnostics import health_report
from memlane.observability.hub import Observability

#: The Content-Type of the text exposition format.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Collector:
    def __init__(self, container: Any, obs: Observability) -> None:
        self.container = container
        self.obs = obs

    def collect(self) -> Any:
        h = HistogramMetricFamily(
            "memlane_operation_duration_seconds", "Server time of each timed operation (seconds).", labels=["operation"]
        )
        for op in self.obs.latency.names():
            buckets, _, total_ms = self.obs.latency.get(op).cumulative_buckets()
            h.add_metric(
                [op],
                [("+Inf" if math.isinf(b) else repr(b / 1000.0), n) for b, n in buckets],
                sum_value=total_ms / 1000.0,
            )
        yield h
        errs = CounterMetricFamily("memlane_errors", "Errors recorded in the error ring since start.", labels=["stage"])
        for stage, n in sorted(self.obs.errors.totals.items()):
            errs.add_metric([stage], n)
        yield errs
        report = health_report(self.container, self.obs)
        g = GaugeMetricFamily("memlane_health_score", "Diagnostics domain score in [0, 1].", labels=["domain"])
        for name, d in report["domains"].items():
            if d["score"] is not None:
                g.add_metric([name], d["score"])
        yield g
        if report["score"] is not None:
            yield GaugeMetricFamily("memlane_health_overall", "Mean of the domain scores.", value=report["score"])
        st = report["domains"]["storage"]
        mem = GaugeMetricFamily("memlane_memories", "Memories by state.", labels=["state"])
        mem.add_metric(["live"], st["memories_live"])
        mem.add_metric(["deleted"], st["memories_deleted"])
        yield mem
        q = report["domains"]["queue"]
        jobs = GaugeMetricFamily("memlane_jobs", "Jobs by state.", labels=["state"])
        for k in ("pending", "dead"):
            jobs.add_metric([k], q[f"jobs_{k}"])
        jobs.add_metric(["total"], q["jobs_total"])
        yield jobs
        p = report["domains"]["predictor"]
        if p["score"] is not None:
            yield GaugeMetricFamily(
                "memlane_predictor_alpha", "Baseline weight alpha in [0, 1].", value=float(p.get("alpha") or 1.0)
            )
            yield GaugeMetricFamily(
                "memlane_predictor_success_rate",
                "Predictor success-rate EMA.",
                value=float(p.get("success_rate") or 0.0),
            )
            yield GaugeMetricFamily(
                "memlane_predictor_model_version", "Serving model version.", value=float(p.get("model_version") or 0)
            )
            yield GaugeMetricFamily(
                "memlane_predictor_sidecar_up",
                "1 when the sidecar process runs.",
                value=1.0 if p.get("sidecar_alive") else 0.0,
            )


def exposition(container: Any, obs: Observability) -> bytes:
    """The text exposition of every metric above.

    Raises:
        StorageError: the health report could not read the database.
    """
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(container, obs))
    return generate_latest(registry)
