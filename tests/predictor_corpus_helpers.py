"""The small service-memory corpus the daemon-level predictor tests share.

Used by ``test_predictor_integration`` and ``test_predictor_verification_service``: 30 notes
about six services of one project, and session contexts that match some of them.
"""

from __future__ import annotations

PROJECT = "atlas"
#: Seconds a test waits for its sidecar to be ready (torch import on a loaded machine).
READY_S = 120
COMPONENTS = ["billing", "search", "auth", "ingest", "reporting", "notifications"]
FACTS = [
    "runs on Python 3.11 inside a slim Docker image pushed to the staging registry",
    "keeps its schema migrations under db/migrations and applies them at deploy time",
    "pages the on-call engineer when the p99 latency exceeds the agreed budget",
    "was rewritten last quarter to replace the cron jobs with a durable task queue",
    "stores user uploads in an S3 bucket with a 30 day lifecycle policy",
]
CORPUS = [f"The {comp} service {fact}." for comp in COMPONENTS for fact in FACTS]  # 30 memories
CONTEXTS = [
    "Fixing the deploy pipeline for the billing service",
    "Tuning search latency alerts",
    "Migrating auth to the new task queue",
    "Cleaning up S3 lifecycle rules for uploads",
    "Reviewing database migrations before the release",
]
