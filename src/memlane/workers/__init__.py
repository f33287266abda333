"""The background-worker runtime (:mod:`memlane.workers.runtime`): polling threads with backoff,
job workers over the ``memory_jobs`` queue, the stale-lease reaper and the registry the container
owns. Generic: the pipeline, recall hints, the graph, documents, drift and V3 define the jobs and
handlers it runs."""
