"""0004: what the pipeline's job queue needs (memory-pipeline-v2.md "Worker Model").

``leased_at`` records when a worker leased the job (the stale-lease reaper and the API use it);
the index serves the lease query (oldest pending job of a type whose ``run_after`` has come).
"""

NAME = "0004_pipeline_jobs"

SQL = """
ALTER TABLE memory_jobs ADD COLUMN leased_at TEXT;
CREATE INDEX idx_jobs_lease ON memory_jobs(status, job_type, created_at);
CREATE INDEX idx_jobs_memory ON memory_jobs(memory_id) WHERE memory_id IS NOT NULL;
"""
