"""Property-based API fuzzing from the OpenAPI schema (schemathesis, a test dependency).

Only one check is asserted: no response is a server error (5xx). The error responses use
memlane's own shape rather than FastAPI's documented HTTPValidationError, so schema
conformance of 4xx bodies is covered by tests/test_api.py instead.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

import schemathesis
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402

from memlane.api.app import create_app  # noqa: E402
from memlane.config import load_settings  # noqa: E402
from memlane.container import open_container  # noqa: E402
from memlane.services.inputs import RememberInput  # noqa: E402


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory):
    home = tmp_path_factory.mktemp("schemathesis")
    with pytest.MonkeyPatch.context() as mp:  # module scope: the autouse env isolation is not up yet
        mp.setenv("MEMLANE_CONFIG", str(home / "no-such-config.yaml"))
        settings_ = load_settings(home=home, embedding={"provider": "none"}, max_body_bytes=64 * 1024,
                                  max_content_chars=2000)
    c = open_container(settings_)
    known = c.memories.remember(RememberInput("a memory the fuzzer can address")).id
    yield schemathesis.openapi.from_asgi("/openapi.json", create_app(c)), known
    c.close()


# Driven by hand with Hypothesis: schemathesis's own pytest integration (``from_fixture`` +
# ``parametrize``) does not work with pytest 9 ('Function' object has no attribute '_nodeid').
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_server_errors(api_schema, mode):
    schema, known = api_schema
    ops = [r.ok() for r in schema.get_all_operations()]
    assert len(ops) >= 10
    for op in ops:
        strategies = [op.as_strategy(generation_mode=mode)]
        if "{memory_id}" in op.path:
            strategies.append(op.as_strategy(generation_mode=mode, path_parameters={"memory_id": known}))
        for strategy in strategies:

            @settings(max_examples=20, deadline=None, database=None,
                      suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
            @given(case=strategy)
            def run(case):
                case.call_and_validate(checks=[not_a_server_error])

            try:
                run()
            except Unsatisfiable:  # negative mode for an operation with nothing to break (GET /health)
                assert mode is GenerationMode.NEGATIVE
