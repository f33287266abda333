"""Memory pipeline v2 (memory-pipeline-v2.md): background extraction and maintenance workers.

Modules:
    config    PipelineV2Settings (``memory.pipelineV2``): every key of the seed's
              "Configuration Reference", the modes, legacy flat keys.
    runtime   PollingWorker (a daemon thread with backoff), JobWorker (leases memory_jobs and
              dispatches to a handler per job type), StaleLeaseReaper, WorkerRegistry.
    jobs      enqueue_extraction and the other job-queue services used by the write paths.
"""
