"""Secrets at rest (issue 37 finding 7), written as the attack: plant every vendor secret in what
the hooks send (transcript, session context, prompts, compaction text) and in a memory that
arrives from a hook, then read the real SQLite file - every row of every table, the FTS index's
terms, and the raw bytes of the database and its WAL - for any of them. The redact.memories
setting is respected: memories it does not cover keep their text."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.scripted_llm import ScriptedLlmServer, prompt_input
from conftest import api_client
from memlane.mcp.local import LocalBackend
from memlane.pipeline.prompts import EXTRACTION_MARKER
from memlane.redact import REDACTED_MARK
from pipeline_helpers import derived, drain, llm_settings
from test_redact import VENDORS

#: (vendor, the secret part that must never be stored)
SECRETS = [(v[0], v[3]) for v in VENDORS]
#: A transcript holding every vendor format, one per line.
PLANTED = "\n".join(f"user: item {i} is {v[1]}\nassistant: noted." for i, v in enumerate(VENDORS))
SID = "5b0c7a5e-2f1d-4c55-9a70-2d1e0f9b7c31"


def _db_texts(db_path: Path) -> list[tuple[str, str, Any]]:
    """(table, column, value) of every text or blob cell of every table in the file, FTS
    shadow tables included, read through a connection of our own (not the daemon's)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        out = []
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for t in tables:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')]
            for row in conn.execute(f'SELECT * FROM "{t}"'):
                out += [(t, c, v) for c, v in zip(cols, row) if isinstance(v, (str, bytes))]
        return out
    finally:
        conn.close()


def _fts_terms(db_path: Path) -> set[str]:
    """Every term in the memories FTS index (fts5vocab over the real file)."""
    conn = sqlite3.connect(str(db_path))
    try:
        conn.execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, memories_fts, 'row')")
        return {r[0] for r in conn.execute("SELECT term FROM temp.vocab")}
    finally:
        conn.close()


def _fragments(secret: str) -> list[str]:
    """What of ``secret`` may not appear: itself, and its FTS-style lower-case alphanumeric runs
    of 8+ characters (the tokenizer splits on punctuation and folds case)."""
    runs = "".join(ch.lower() if ch.isalnum() else " " for ch in secret).split()
    return [secret] + [r for r in runs if len(r) >= 8]


def assert_no_secret_stored(home: Path, secrets: list[tuple[str, str]] = SECRETS) -> None:
    """No planted secret in any cell, any FTS term, or the raw bytes of the database and WAL."""
    db = home / "memories.db"
    cells = _db_texts(db)
    terms = _fts_terms(db)
    raw = b"".join(p.read_bytes() for p in (db, home / "memories.db-wal") if p.exists())
    for vendor, secret in secrets:
        for frag in _fragments(secret):
            hits = [(t, c) for t, c, v in cells if (frag in v if isinstance(v, str) else frag.encode() in v)]
            assert hits == [], f"{vendor}: {frag!r} stored in {hits}"
            assert frag.encode() not in raw, f"{vendor}: {frag!r} in the database file bytes"
        assert not any(f in term for f in _fragments(secret)[1:] for term in terms), vendor


def rows(c, sql: str, *args: Any) -> list[dict[str, Any]]:
    return c.db.read(lambda conn: [dict(r) for r in conn.execute(sql, args)])


@pytest.fixture
def client(store):
    with api_client(store) as cl:
        yield cl


# -- what the hooks send -------------------------------------------------------------------------


def test_transcript_with_every_vendor_secret_is_stored_redacted(store, client) -> None:
    r = client.post("/api/hooks/session-end", json={"session_key": SID, "transcript": PLANTED, "wait": True})
    assert r.status_code == 200, r.text
    assert r.json()["transcript_stored"] is True
    (row,) = rows(store, "SELECT content FROM session_transcripts WHERE session_key = ?", SID)
    for i, (vendor, _text, expected, secret) in enumerate(VENDORS):
        assert secret not in row["content"], vendor
        assert f"item {i} is {expected}\n" in row["content"] + "\n", vendor  # the rest is kept
    store.checkpoints.flush()
    assert_no_secret_stored(store.settings.home)


def test_session_context_is_stored_redacted(store, client) -> None:
    r = client.post("/api/hooks/session-start", json={"session_key": SID, "context": PLANTED})
    assert r.status_code == 200, r.text
    store.sessions.inflight.wait_all()  # the start's record is written after the answer
    (row,) = rows(store, "SELECT context FROM sessions WHERE session_key = ?", SID)
    assert row["context"].count(REDACTED_MARK) >= len(VENDORS)
    for vendor, secret in SECRETS:
        assert secret not in row["context"], vendor
    assert_no_secret_stored(store.settings.home)


def test_prompts_checkpoints_and_compaction_text_are_stored_redacted(store, client) -> None:
    assert client.post("/api/hooks/session-start", json={"session_key": SID}).status_code == 200
    for _, text, _, _ in VENDORS:
        r = client.post("/api/hooks/user-prompt-submit", json={"session_key": SID, "prompt": f"use {text} please"})
        assert r.status_code == 200, r.text
    r = client.post(
        "/api/hooks/pre-compaction", json={"session_key": SID, "context": PLANTED, "custom_instructions": PLANTED}
    )
    assert r.status_code == 200, r.text
    r = client.post("/api/hooks/compaction-complete", json={"session_key": SID, "summary": PLANTED})
    assert r.status_code == 200, r.text
    assert client.post("/api/hooks/session-end", json={"session_key": SID, "wait": True}).status_code == 200
    store.checkpoints.flush()
    store.sessions.inflight.wait_all()
    checkpoints = rows(store, "SELECT digest, memory_queries FROM session_checkpoints WHERE session_key = ?", SID)
    assert len(checkpoints) >= 2 and any(REDACTED_MARK in c["digest"] + c["memory_queries"] for c in checkpoints)
    assert_no_secret_stored(store.settings.home)


# -- memories that arrive from a hook ----------------------------------------------------------


def _hook_memory(i: int, text: str) -> dict[str, Any]:
    # "Alice Smith <verb> ..." makes the inline linker store an entity attribute from the text;
    # the item number keeps the memories distinct once redacted (equal texts would deduplicate)
    return {
        "content": f"Alice Smith deploys item {i} with {text} every Friday.",
        "source_type": "hook",
        "context": f"the session said {text}",
        "why": f"seen {text}",
        "tags": ["deploy"],
        "metadata": {"command": f"run {text}", "nested": [{"env": text}]},
    }


def test_hook_memory_is_redacted_in_rows_history_fts_and_entity_attributes(store, client) -> None:
    r = client.post("/api/memory/remember", json={"memories": [_hook_memory(i, v[1]) for i, v in enumerate(VENDORS)]})
    assert r.status_code == 200, r.text
    ids = [x["id"] for x in r.json()["results"]]
    assert len(set(ids)) == len(VENDORS)
    mems = rows(store, "SELECT content, context, metadata FROM memories WHERE source_type = 'hook'")
    assert len(mems) == len(VENDORS) and all(REDACTED_MARK in m["content"] for m in mems)
    attrs = rows(store, "SELECT content FROM entity_attributes")
    assert attrs and any(REDACTED_MARK in a["content"] for a in attrs)  # the linker saw the redacted text
    # a later PATCH of a hook memory is redacted too
    _, text, _, secret = VENDORS[0]
    r = client.patch(
        f"/api/memory/{ids[1]}",
        json={
            "content": f"Alice Smith now deploys with {text}.",
            "context": text,
            "metadata": {"k": text},
            "tags": [text],
            "why": f"rotated {text}",
        },
    )
    assert r.status_code == 200, r.text
    assert secret not in json.dumps(r.json())
    assert_no_secret_stored(store.settings.home)


def _echo_extraction(prompt: str) -> str:
    """A loopback LLM that extracts the memory's own text as a fact and an entity relation."""
    if EXTRACTION_MARKER not in prompt:
        return '{"action": "ADD", "confidence": 0.9, "reason": "new"}'
    text = prompt_input(prompt)
    return json.dumps(
        {
            "facts": [{"content": f"Fact: {text}", "type": "fact", "confidence": 0.95}],
            "entities": [{"source": "Alice Smith", "relationship": "uses", "target": text[:180], "confidence": 0.9}],
        }
    )


@pytest.fixture
def echo_llm() -> Iterator[ScriptedLlmServer]:
    with ScriptedLlmServer(_echo_extraction) as server:
        yield server


def test_llm_extraction_of_a_hook_memory_never_sees_its_secret(open_store, echo_llm) -> None:
    c = open_store(llm=llm_settings(echo_llm), memory={"pipelineV2": {"enabled": True}})
    with api_client(c) as cl:
        r = cl.post("/api/memory/remember", json={"memories": [_hook_memory(i, v[1]) for i, v in enumerate(VENDORS)]})
        assert r.status_code == 200, r.text
    assert drain(c) >= len(VENDORS)
    assert echo_llm.prompts, "the extraction LLM was called"
    for vendor, secret in SECRETS:
        assert not any(secret in p for p in echo_llm.prompts), vendor
    assert derived(c), "the pipeline wrote the extracted facts"
    assert_no_secret_stored(c.settings.home)


# -- the setting is respected ------------------------------------------------------------------


def test_api_remember_keeps_its_text_by_default(store, client) -> None:
    _, text, _, secret = VENDORS[0]
    r = client.post("/api/memory/remember", json={"content": f"the key is {text}"})
    assert r.status_code == 200, r.text
    assert store.memories.get(r.json()["id"]).content == f"the key is {text}"  # "hooks": not a hook memory


def test_redact_off_keeps_hook_memories_raw(open_store) -> None:
    c = open_store(redact={"memories": "off"})
    _, text, _, _ = VENDORS[0]
    with api_client(c) as cl:
        r = cl.post("/api/memory/remember", json={"content": f"the key is {text}", "source_type": "hook"})
    assert r.status_code == 200, r.text
    assert c.memories.get(r.json()["id"]).content == f"the key is {text}"


def test_redact_all_covers_api_and_mcp_remembers(open_store) -> None:
    c = open_store(redact={"memories": "all"})
    with api_client(c) as cl:
        r = cl.post(
            "/api/memory/remember",
            json={"memories": [{"content": f"API note {i}: {v[1]}"} for i, v in enumerate(VENDORS)]},
        )
        assert r.status_code == 200, r.text
    mcp = LocalBackend(c)
    for i, (_, text, _, _) in enumerate(VENDORS):
        mcp.store(f"MCP note {i}: {text}", type="fact", importance=0.5, project=None, tags=[], who="mcp")
    assert len(rows(c, "SELECT id FROM memories")) == 2 * len(VENDORS)
    assert_no_secret_stored(c.settings.home)


def test_redact_memories_rejects_an_unknown_mode(tmp_path) -> None:
    from memlane.config import load_settings
    from memlane.errors import ConfigError

    with pytest.raises(ConfigError, match="redact.memories"):
        load_settings(home=tmp_path, redact={"memories": "some"})


# -- end to end: the real hook command against a real daemon ------------------------------------


def _transcript_line(role: str, text: str) -> str:
    return json.dumps(
        {
            "type": role,
            "sessionId": SID,
            "uuid": os.urandom(4).hex(),
            "message": {"role": role, "content": [{"type": "text", "text": text}] if role == "assistant" else text},
        }
    )


def test_hook_command_session_end_stores_the_transcript_redacted(tmp_path, start_daemon) -> None:
    home = tmp_path / "home"
    daemon = start_daemon(home, provider="none")
    claude = tmp_path / "claude"
    project = claude / "projects" / "-work-proj"
    project.mkdir(parents=True)
    transcript = project / f"{SID}.jsonl"
    transcript.write_text(
        "\n".join(
            line
            for _, text, _, _ in VENDORS
            for line in (_transcript_line("user", f"deploy with {text}"), _transcript_line("assistant", "done"))
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMLANE_")}
    env.update(
        MEMLANE_HOME=str(home),
        MEMLANE_DAEMON_URL=daemon.url,
        MEMLANE_CONFIG=str(home / "none.yaml"),
        CLAUDE_CONFIG_DIR=str(claude),
    )
    payload = {
        "session_id": SID,
        "transcript_path": str(transcript),
        "cwd": str(tmp_path),
        "hook_event_name": "SessionEnd",
        "reason": "other",
    }
    p = subprocess.run(
        [sys.executable, "-m", "memlane", "hook", "session-end"],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    with daemon.client() as cl:
        session = cl.get(f"/api/sessions/{SID}")
    assert session.status_code == 200, (session.text, (home / "logs" / "hooks.log").read_text())
    conn = sqlite3.connect(f"file:{home / 'memories.db'}?mode=ro", uri=True)
    try:
        (stored,) = conn.execute("SELECT content FROM session_transcripts WHERE session_key = ?", (SID,)).fetchone()
    finally:
        conn.close()
    assert stored.count(REDACTED_MARK) >= len(VENDORS)
    assert_no_secret_stored(home)
