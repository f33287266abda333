"""Services: the behaviour, between storage (SQL) and the surfaces (HTTP, CLI).

Modules:
    inputs           dataclasses in and out of the services.
    validation       checks shared by every surface.
    clock            timestamps.
    memory_service   remember, get, update, delete, recover, history, list, stats.
    recall_service   hybrid recall.
    config_service   POST /api/config: validate a partial config, write config.yaml, apply hot flags.
"""
