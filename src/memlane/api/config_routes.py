"""``GET /api/config`` (the effective settings, secrets masked) and ``POST /api/config`` (change them).

The POST body is a partial config shaped like config.yaml (camelCase or snake_case keys). A key
of :data:`memlane.services.config_service.HTTP_FORBIDDEN_KEYS` (``daemon_url``, ``host``,
``port``, ``home``, ``require_token``, ``allowed_hosts``, every provider ``base_url``,
``api_key`` and ``command``...) refuses the whole patch with 403 ``config_forbidden``. The rest
is validated strictly (400 ``config_error`` naming the key path: wrong types are not coerced, NUL
and lone surrogates are refused), merged into ``$MEMLANE_HOME/config.yaml`` atomically, and
only the listed hot keys are applied at once; the answer lists ``applied`` and
``restart_required`` keys (see memlane.services.config_service). Nothing is written when
anything is refused.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body

from memlane.config import public_settings
from memlane.container import Container
from memlane.services.config_service import update_config


def router(container: Container) -> APIRouter:
    """The config routes over ``container.settings``."""
    r = APIRouter(tags=["meta"])

    @r.get("/api/config")
    def get_config() -> dict[str, Any]:
        """The effective settings (secrets masked)."""
        return public_settings(container.settings)

    @r.post("/api/config")
    def post_config(
        patch: Any = Body(
            ...,
            openapi_examples={
                "shadow": {"value": {"memory": {"pipelineV2": {"shadowMode": True}}}},
                "recall": {"value": {"recall": {"alpha": 0.6}}},
            },
        ),
    ) -> dict[str, Any]:
        """Validate a partial config, merge it into config.yaml (atomic write), apply the hot keys
        now. Returns ``path``, ``applied``, ``restart_required``, ``unchanged``, ``warnings``, the
        pipeline ``mode`` and the effective ``config``. 403 ``config_forbidden`` for a key that is
        set in config.yaml or the environment only; 400 ``config_error`` for a bad key or value."""
        change = update_config(container.settings, patch)
        if "predictor.enabled" in change.applied:
            if container.predictor is not None:
                container.predictor.sync()  # off: the sidecar stops now; on: it starts if there is a model
            elif container.settings.predictor.enabled:  # started without a predictor: cannot run one now
                change.applied.remove("predictor.enabled")
                change.restart_required.append("predictor.enabled")
        return {
            "path": str(change.path),
            "applied": change.applied,
            "restart_required": change.restart_required,
            "unchanged": change.unchanged,
            "warnings": change.warnings,
            "pipeline": container.settings.memory.pipeline_v2.flags(),
            "config": public_settings(container.settings),
        }

    return r
