"""Observability of the daemon: latency histograms, the error ring, health domains, timelines
and Prometheus metrics (predictive-memory-scorer.md Phase 4). See docs/dashboard.md."""
