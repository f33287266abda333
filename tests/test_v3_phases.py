"""Methodology plugins and phase-aware retrieval (issue 42 items 2 and 6; seed
memory-system-v3-design.md sections 3 and 7): each plugin's phase table row by row, the type
weights of each phase applied in recall, session-start and prompt-submit, the unchanged ranking
without a phase, work-unit resolution, hook payloads, relays and work states, the settings
(built-in ids only, hot over POST /api/config) and the routes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import api_client
from memlane.config import load_settings
from memlane.config.clock import now_iso
from memlane.config.methodology import MethodologyId
from memlane.errors import ConfigError, ValidationError
from memlane.services.inputs import RecallQuery, RememberInput
from memlane.sessions.inputs import PromptInput, StartInput
from memlane.storage.models import Memory
from memlane.v3.methodology.bmad import BmadPlugin
from memlane.v3.methodology.native import NativePlugin
from memlane.v3.methodology.phases import PHASE_WEIGHTS, UNIVERSAL_PHASES, phase_weight
from memlane.v3.methodology.plugin import ExecutionContext
from memlane.v3.methodology.registry import PLUGIN_IDS, get_plugin
from memlane.v3.model import TYPE_FIELDS, V3_TYPES

SEED = Path(__file__).resolve().parents[1] / ".." / "shared" / "seeds" / "memory-system-v3-design.md"

NATIVE_ROWS = [
    ("planning", "define"),
    ("spec", "define"),
    ("coding", "implement"),
    ("qa_review", "validate"),
    ("qa_fix", "refine"),
    ("debugging", "refine"),
    ("insights", "explore"),
]
BMAD_ROWS = [
    ("analyst", "define"),
    ("pm", "define"),
    ("architect", "define"),
    ("story_creation", "define"),
    ("dev", "implement"),
    ("story_development", "implement"),
    ("qa", "validate"),
    ("story_acceptance", "validate"),
    ("sm", "reflect"),
    ("retrospective", "reflect"),
]


# -- phase tables -----------------------------------------------------------------------------


@pytest.mark.parametrize("name, universal", NATIVE_ROWS)
def test_native_phase_row(name, universal):
    assert NativePlugin().map_phase(name) == universal


@pytest.mark.parametrize("name, universal", BMAD_ROWS)
def test_bmad_phase_row(name, universal):
    assert BmadPlugin().map_phase(name) == universal


@pytest.mark.parametrize("plugin", [NativePlugin(), BmadPlugin()], ids=lambda p: p.id)
def test_unknown_phase_is_explore_and_universal_names_map_to_themselves(plugin):
    assert plugin.map_phase("brainstorm") == "explore"
    for p in UNIVERSAL_PHASES:
        assert plugin.map_phase(p) == p
    for bad in ("", "   ", "x" * 101, 3):
        with pytest.raises(ValidationError):
            plugin.map_phase(bad)


def _seed_weights() -> dict[str, dict[str, float]]:
    text = SEED.read_text(encoding="utf-8")
    block = text[text.index("const PHASE_WEIGHTS") :]
    block = block[: block.index("};") + 2]
    out = {}
    for phase, body in re.findall(r"^  (\w+): \{(.*?)^  \},", block, flags=re.S | re.M):
        out[phase] = {t: float(w) for t, w in re.findall(r"(\w+): ([0-9.]+)", body)}
    return out


@pytest.mark.skipif(not SEED.is_file(), reason="the seed is not beside the repository")
@pytest.mark.parametrize("phase", UNIVERSAL_PHASES)
def test_weights_row_is_the_seed_table(phase):
    assert PHASE_WEIGHTS[phase] == _seed_weights()[phase]


def test_unlisted_type_and_no_phase_weigh_one():
    assert phase_weight(None, "gotcha") == 1.0
    assert phase_weight("refine", "preference") == 1.0  # the seed leaves it out of refine
    assert phase_weight("implement", "fact") == 1.0  # not a V3 type
    assert phase_weight("implement", "gotcha") == 1.5


# -- weights applied --------------------------------------------------------------------------


def _fields(t: str) -> dict:
    """The required extended fields of type ``t`` with valid values."""
    values = {
        "str": "x",
        "bool": True,
        "int": 1,
        "num": 1.0,
        "str_list": ["a.py"],
        "steps": [{"order": 1, "description": "do it"}],
        "obj": {},
    }
    out = {}
    for name, (kind, required) in TYPE_FIELDS.get(t, {}).items():
        if required:
            out[name] = "precondition" if kind.startswith("enum:") else values[kind]
    return out


def _typed_store(c, types=V3_TYPES, project=None) -> dict[str, str]:
    """One memory per type, texts of equal length and the same query words: id -> type."""
    ids = {}
    for i, t in enumerate(types):
        m = c.memories.remember(
            RememberInput(
                content=f"billing invoice rounding note q{i:02d}",
                type=t,
                type_fields=_fields(t),
                project=project,
                importance=0.5,
            )
        )
        ids[m.id] = t
    return ids


@pytest.mark.parametrize("phase", UNIVERSAL_PHASES)
def test_recall_orders_by_the_phase_weights(store, phase):
    ids = _typed_store(store)
    plain = store.recall.recall(RecallQuery(query="billing invoice rounding", limit=len(ids), touch=False)).hits
    hits = store.recall.recall(
        RecallQuery(query="billing invoice rounding", limit=len(ids), touch=False, phase=phase)
    ).hits
    assert len(hits) == len(plain) == len(ids)
    weights = [phase_weight(phase, ids[h.memory.id]) for h in hits]
    assert weights == sorted(weights, reverse=True)
    base = {h.memory.id: h.score for h in plain}
    for h in hits:  # final_score = score x weight
        assert h.score == pytest.approx(base[h.memory.id] * phase_weight(phase, ids[h.memory.id]), rel=1e-9)


def test_recall_phase_lifts_a_hit_from_below_the_limit(store):
    ids = _typed_store(store)
    # limit 4: the best 20 candidates are weighed (PHASE_POOL_FACTOR), all 16 here
    top_plain = store.recall.recall(RecallQuery(query="billing invoice rounding", limit=4, touch=False)).hits
    hits = store.recall.recall(
        RecallQuery(query="billing invoice rounding", limit=4, touch=False, phase="validate")
    ).hits
    best = {"error_pattern", "e2e_observation", "requirement", "gotcha"}  # validate: 1.5, 1.5, 1.4, 1.2
    assert {ids[h.memory.id] for h in hits} == best
    assert {ids[h.memory.id] for h in top_plain} != best


def test_no_phase_ranking_is_exactly_unchanged(store):
    """Without a phase nothing is weighed: a store of types no phase lists ranks and scores the
    same with any phase as without; and with V3 types, no phase is the plain hybrid order."""
    for i in range(12):
        store.memories.remember(RememberInput(content=f"deploy staging rollback step {i} " + "x" * i, type="fact"))
    q = dict(query="deploy staging rollback", limit=12, touch=False)
    plain = [(h.memory.id, h.score) for h in store.recall.recall(RecallQuery(**q)).hits]
    for phase in UNIVERSAL_PHASES:
        assert [(h.memory.id, h.score) for h in store.recall.recall(RecallQuery(**q, phase=phase)).hits] == plain
    now = now_iso()  # one clock for both starts: effective scores decay with time
    start_plain = store.sessions.start(StartInput("np-1", context="deploy staging", now=now))
    start_phase = store.sessions.start(StartInput("np-2", context="deploy staging", phase="coding", now=now))
    assert start_plain.injected == start_phase.injected
    rows = lambda k: [  # noqa: E731
        (r["memory_id"], r["rank"], r["final_score"], r["baseline_rank"]) for r in _rows(store, k)
    ]
    assert rows("np-1") == rows("np-2")


def _rows(c, key):
    """The session's candidate rows (memory_id, rank, final_score, baseline_rank), by rank."""
    return sorted(
        (
            {"memory_id": r.memory_id, "rank": r.rank, "final_score": r.final_score, "baseline_rank": r.baseline_rank}
            for r in c.sessions.get(key)["memories"]
        ),
        key=lambda r: r["rank"],
    )


def test_session_start_without_phase_equals_no_phase_service(open_store):
    c = open_store()
    _typed_store(c)
    now = now_iso()
    with_service = c.sessions.start(StartInput("a", context="billing invoice", now=now))
    phases, c.sessions.phases = c.sessions.phases, None
    try:
        without = c.sessions.start(StartInput("b", context="billing invoice", now=now))
    finally:
        c.sessions.phases = phases
    assert with_service.injected == without.injected
    assert [(r["memory_id"], r["rank"], r["final_score"]) for r in _rows(c, "a")] == [
        (r["memory_id"], r["rank"], r["final_score"]) for r in _rows(c, "b")
    ]


@pytest.mark.parametrize(
    "name, universal",
    [
        ("planning", "define"),
        ("coding", "implement"),
        ("qa_review", "validate"),
        ("debugging", "refine"),
        ("insights", "explore"),
        ("reflect", "reflect"),
    ],
)
def test_session_start_ranks_by_the_phase(store, name, universal):
    ids = _typed_store(store)
    res = store.sessions.start(StartInput(f"s-{name}", context="billing invoice", phase=name))
    assert res.phase["phase"] == universal and res.phase["methodology_phase"] == name
    ranked = [ids[r["memory_id"]] for r in _rows(store, f"s-{name}")]
    weights = [phase_weight(universal, t) for t in ranked]
    assert weights == sorted(weights, reverse=True)
    assert ids[res.injected[0]["id"]] in {
        t for t in V3_TYPES if phase_weight(universal, t) == max(PHASE_WEIGHTS[universal].values())
    }


def test_prompt_submit_uses_the_sessions_phase(store):
    ids = _typed_store(store)
    store.settings.sessions.prompt_min_score = 0.0
    store.sessions.start(StartInput("p1", context="something else", phase="qa_review"))
    res = store.sessions.prompt(PromptInput("p1", prompt="billing invoice rounding"))
    assert res.phase["phase"] == "validate"
    weights = [phase_weight("validate", ids[m]) for m in res.matched]
    assert weights == sorted(weights, reverse=True) and weights[0] == 1.5
    # a later prompt naming another phase replaces it for the session
    res = store.sessions.prompt(PromptInput("p1", prompt="billing invoice rounding", phase="insights"))
    assert res.phase["phase"] == "explore"
    assert ids[res.matched[0]] == "decision"  # explore's 1.4, the largest


# -- work units, hooks, relays, work state ------------------------------------------------------


def test_native_work_unit_ref():
    ref = NativePlugin().resolve_work_unit_ref(ExecutionContext({"spec": "042", "subtask": "3"}))
    assert ref == {"methodology": "native", "hierarchy": ["spec_042", "subtask_3"], "label": "Spec 042 / Subtask 3"}
    assert NativePlugin().resolve_work_unit_ref(ExecutionContext({"spec": "7"}))["label"] == "Spec 7"


def test_bmad_work_unit_ref_with_labels():
    ref = BmadPlugin().resolve_work_unit_ref(
        ExecutionContext(
            {"epic": "3", "story": "3.2", "task": "5", "epic_label": "Epic 3: Billing", "story_label": "Story 3.2"}
        )
    )
    assert ref == {
        "methodology": "bmad",
        "hierarchy": ["epic_3", "story_3.2", "task_5"],
        "label": "Epic 3: Billing / Story 3.2 / Task 5",
    }


@pytest.mark.parametrize(
    "values, needle",
    [
        ({"story": "1"}, "unknown keys"),
        ({}, "at least one"),
        ({"spec": ""}, "must not be empty"),
        ({"spec": 4}, "expected a string"),
    ],
)
def test_bad_work_unit_is_refused(values, needle):
    with pytest.raises(ValidationError, match=needle):
        NativePlugin().resolve_work_unit_ref(ExecutionContext(values))


@pytest.mark.parametrize(
    "plugin, payload, phase",
    [
        (NativePlugin(), {"permission_mode": "plan"}, "planning"),
        (NativePlugin(), {"tool_name": "Task", "tool_input": {"subagent_type": "qa_reviewer"}}, "qa_review"),
        (BmadPlugin(), {"permission_mode": "plan"}, "story_creation"),
        (BmadPlugin(), {"tool_name": "Task", "tool_input": {"subagent_type": "dev"}}, "dev"),
        (BmadPlugin(), {"tool_name": "Task", "tool_input": "dev"}, None),
        (NativePlugin(), {"permission_mode": "default"}, None),
    ],
)
def test_phase_from_hook_payload(plugin, payload, phase):
    assert plugin.phase_from_hook(payload) == phase


def _mem(t: str, text: str, confidence: float = 1.0) -> Memory:
    return Memory(
        content=text,
        type=t,
        confidence=confidence,
        id=t,
        normalized_content=text,
        content_hash=t,
        seq=1,
        updated_at="",
        last_accessed=None,
        access_count=0,
        is_deleted=False,
        deleted_at=None,
        superseded_by=None,
        extraction_status="done",
    )


def test_relays_and_their_filters():
    assert [(t.source, t.target) for t in NativePlugin().relay_transitions()] == [
        ("planner", "coder"),
        ("coder", "qa_reviewer"),
        ("qa_reviewer", "qa_fixer"),
    ]
    assert [(t.source, t.target) for t in BmadPlugin().relay_transitions()] == [
        ("analyst", "architect"),
        ("architect", "dev"),
        ("dev", "qa"),
        ("qa", "sm"),
    ]
    mems = [_mem("gotcha", "the ledger rounds half-even"), _mem("error_pattern", "KeyError on empty cart")]
    block = NativePlugin().format_relay_context(mems, "qa_fixer")
    assert "From qa_reviewer:" in block and "[error_pattern] KeyError" in block and "ledger" not in block
    assert "[gotcha] the ledger" in NativePlugin().format_relay_context(mems, "coder")
    assert NativePlugin().format_relay_context(mems, "nobody") == ""
    assert BmadPlugin().format_relay_context(mems, "sm") == ""  # only decisions and module insights


def test_work_state_formatting():
    assert (
        NativePlugin().format_work_state(
            {"completed_subtasks": ["1", "2"], "in_progress_subtask": "3", "key_decisions": ["use Decimal"]}
        )
        == "Completed subtasks: 1, 2\nIn progress: 3\nDecision: use Decimal"
    )
    assert (
        BmadPlugin().format_work_state(
            {"stories_completed": ["3.1"], "current_story": "3.2", "acceptance_criteria_status": {"AC1": "passed"}}
        )
        == "Stories completed: 3.1\nCurrent story: 3.2\nAcceptance criterion AC1: passed"
    )
    with pytest.raises(ValidationError, match="completed_subtasks"):
        NativePlugin().format_work_state({"completed_subtasks": "1"})


# -- settings -----------------------------------------------------------------------------------


def test_registry_ids_are_the_settings_ids():
    from typing import get_args

    assert PLUGIN_IDS == get_args(MethodologyId)
    with pytest.raises(ValidationError, match="native, bmad"):
        get_plugin("memlane.v3.methodology.native.NativePlugin")


@pytest.mark.parametrize(
    "value, needle",
    [
        ({"default": "tdd"}, "default"),
        ({"default": "os.system"}, "default"),
        ({"projects": [{"project": "a", "methodology": "bmad"}, {"project": "a", "methodology": "native"}]}, "twice"),
        ({"projects": [{"project": "a"}]}, "methodology"),
        ({"projects": {"a": "bmad"}}, "projects"),
        ({"plugin_path": "/tmp/x.py"}, "plugin_path"),
    ],
)
def test_bad_methodology_settings_are_refused(tmp_path, value, needle):
    with pytest.raises(ConfigError, match=needle):
        load_settings(home=tmp_path, methodology=value)


def test_methodology_per_project_and_hot_over_http(store):
    store.settings.sessions.prompt_min_score = 0.0
    client = api_client(store)
    assert client.get("/api/v3/methodology", params={"project": "shop"}).json()["methodology"] == "native"
    r = client.post("/api/config", json={"methodology": {"projects": [{"project": "shop", "methodology": "bmad"}]}})
    assert r.status_code == 200, r.text
    assert "methodology.projects" in r.json()["applied"]
    assert client.get("/api/v3/methodology", params={"project": "shop"}).json()["methodology"] == "bmad"
    assert client.get("/api/v3/methodology", params={"project": "other"}).json()["methodology"] == "native"
    # "qa" is a BMAD phase (validate) and means nothing to native (explore)
    shop = client.post("/api/v3/sessions/phase", json={"session_key": "k1", "project": "shop", "phase": "qa"}).json()
    other = client.post("/api/v3/sessions/phase", json={"session_key": "k2", "project": "other", "phase": "qa"}).json()
    assert (shop["methodology"], shop["phase"]) == ("bmad", "validate")
    assert (other["methodology"], other["phase"]) == ("native", "explore")
    r = client.post("/api/config", json={"methodology": {"default": "tdd"}})
    assert r.status_code == 400 and "methodology.default" in r.text
    assert store.settings.methodology.default == "native"


# -- routes ---------------------------------------------------------------------------------------


def test_phase_routes_and_hooks(store):
    _typed_store(store, project="shop")
    client = api_client(store)
    desc = client.get("/api/v3/methodology").json()
    assert [p["id"] for p in desc["plugins"]] == ["native", "bmad"] and desc["phases"] == list(UNIVERSAL_PHASES)
    assert desc["weights"]["implement"]["gotcha"] == 1.5
    r = client.post(
        "/api/hooks/session-start",
        json={
            "session_key": "h1",
            "project": "shop",
            "context": "billing invoice",
            "permission_mode": "plan",
            "work_unit": {"spec": "042", "subtask": "3"},
        },
    )
    assert r.status_code == 200, r.text
    ph = r.json()["phase"]
    assert (ph["phase"], ph["methodology_phase"], ph["source"]) == ("define", "planning", "hook")
    assert ph["work_unit_ref"]["hierarchy"] == ["spec_042", "subtask_3"]
    got = client.get("/api/v3/sessions/phase", params={"session_key": "h1", "project": "shop"}).json()
    assert got == ph
    r = client.post(
        "/api/hooks/user-prompt-submit",
        json={"session_key": "h1", "project": "shop", "prompt": "billing", "phase": "coding"},
    )
    assert r.json()["phase"]["phase"] == "implement"
    assert r.json()["phase"]["work_unit_ref"]["label"] == "Spec 042 / Subtask 3"  # kept
    r = client.post(
        "/api/memory/recall",
        json={"query": "billing invoice rounding", "limit": 4, "project": "shop", "session_key": "h1"},
    )
    assert r.status_code == 200
    types = [h["type"] for h in r.json()["results"]]
    assert types[0] in ("gotcha",)  # implement's 1.5
    r = client.post("/api/hooks/session-end", json={"session_key": "h1", "project": "shop"})
    assert r.status_code == 200
    assert client.get("/api/v3/sessions/phase", params={"session_key": "h1"}).json()["phase"] is None


@pytest.mark.parametrize(
    "path, body",
    [
        ("/api/hooks/session-start", {"session_key": "b", "work_unit": {"epic": "1"}}),
        ("/api/hooks/session-start", {"session_key": "b", "work_unit": ["spec"]}),
        ("/api/hooks/session-start", {"session_key": "b", "phase": 3}),
        ("/api/hooks/user-prompt-submit", {"session_key": "b", "prompt": "x", "phase": "\x00"}),
        ("/api/hooks/user-prompt-submit", {"session_key": "b", "prompt": "x", "phase": ""}),
        ("/api/memory/recall", {"query": "x", "phase": "y" * 101}),
        ("/api/v3/sessions/phase", {"session_key": "b", "phase": "qa", "extra": 1}),
    ],
)
def test_bad_phase_inputs_are_422(store, path, body):
    r = api_client(store).post(path, json=body)
    assert r.status_code == 422, r.text


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_mcp_memory_phase(tmp_path, anyio_backend):
    from test_mcp import InProcessDaemon, http_session, ok

    d = InProcessDaemon(tmp_path / "home")
    d.start()
    try:
        async with http_session(d.url) as s:
            got = ok(
                await s.call_tool(
                    "memory_phase", {"session_key": "m1", "phase": "qa_review", "work_unit": {"spec": "12"}}
                )
            )
            assert (got["methodology"], got["phase"], got["work_unit_ref"]["label"]) == (
                "native",
                "validate",
                "Spec 12",
            )
            assert ok(await s.call_tool("memory_phase", {"session_key": "m1"}))["phase"] == "validate"
            bad = await s.call_tool("memory_phase", {"session_key": "m1", "work_unit": {"epic": "1"}})
            assert bad.is_error and "unknown keys" in bad.content[0].text
        assert d.container.phases.current("m1").phase == "validate"
    finally:
        d.stop()


def test_claude_code_plan_mode_reaches_the_phase(store, tmp_path):
    """A real SessionStart payload in plan mode, through the hook client's body builder, to the
    daemon's route: the native plugin's planning phase (define)."""
    from memlane.connectors.events import from_claude_code
    from memlane.hookclient import build_body

    ev = from_claude_code(
        "SessionStart",
        {
            "session_id": "cc-1",
            "cwd": str(tmp_path),
            "hook_event_name": "SessionStart",
            "source": "startup",
            "permission_mode": "plan",
            "model": "x",
        },
    )
    body = build_body(ev)
    assert body["permission_mode"] == "plan"
    r = api_client(store).post("/api/hooks/session-start", json=body)
    assert r.status_code == 200, r.text
    assert (r.json()["phase"]["methodology_phase"], r.json()["phase"]["phase"]) == ("planning", "define")
