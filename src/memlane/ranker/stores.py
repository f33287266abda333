"""LoCoMo stores for the learned ranker: one store per conversation, built once and reused.

The training command (``memlane train ranker``) and the cross-validated retrieval bench
(``memlane bench retrieval --ranker learned --cv conversation``) both need every LoCoMo
conversation ingested exactly as ``memlane bench retrieval`` ingests it
(:func:`turn_inputs`). Embedding 5,882 turns twice takes minutes on
2 cores, so a store built under a work directory is kept and reopened when it is complete
(its live memory count equals the conversation's distinct turns and it was built with the
same embedding model and context length). Nothing here writes outside ``root``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from memlane.config import Settings
from memlane.config.clock import to_iso
from memlane.container import Container, open_container
from memlane.embedding.base import Embedder
from memlane.ranker.locomo import Conversation
from memlane.services.inputs import RememberInput
from memlane.storage import memories as mem_sql

#: Marker file written once a store is complete: ``{"model": ..., "context_turns": ..., "memories": ...}``.
MARKER = "ranker-store.json"


def turn_inputs(conv: Conversation, context_turns: int) -> list[RememberInput]:
    """The RememberInputs of a conversation's turns, in order."""
    items = []
    by_session: dict[int, list] = {}
    for t in conv.turns:
        by_session.setdefault(t.session, []).append(t)
    for session in sorted(by_session):
        turns = by_session[session]
        for i, t in enumerate(turns):
            prev = turns[max(0, i - context_turns) : i] if context_turns > 0 else []
            items.append(
                RememberInput(
                    content=t.text,
                    type="dialogue",
                    created_at=to_iso(t.timestamp),
                    metadata={"dia_id": t.dia_id, "session": t.session, "conversation": conv.id},
                    source_type="locomo",
                    source_id=f"{conv.id}:{t.dia_id}",
                    context=" ".join(p.text for p in prev) or None,
                )
            )
    return items


@dataclass(frozen=True)
class StoreInfo:
    """A conversation's store: where it is, ``memory id -> LoCoMo dia_id`` and ``seq -> dia_id``."""

    home: Path
    id_to_dia: dict[str, str]
    seq_to_dia: dict[int, str]
    built: bool = False  # built by this call (False: reused)


def store_settings(home: Path, *, embedded: bool) -> Settings:
    """The settings a bench store is opened with: shipped defaults except the embedding
    provider (``local`` or ``none``) and ``sqlite_synchronous=NORMAL`` (a scratch store)."""
    return Settings(home=home, embedding={"provider": "local" if embedded else "none"}, sqlite_synchronous="NORMAL")


def _open(home: Path, embedder: Embedder | None) -> Container:
    settings = store_settings(home, embedded=embedder is not None)
    return open_container(settings, embedder=embedder) if embedder is not None else open_container(settings)


@contextmanager
def open_store(home: Path, embedder: Embedder | None) -> Iterator[Container]:
    """Open a bench store with the shared ``embedder`` (not closed with the store)."""
    c = _open(home, embedder)
    try:
        yield c
    finally:
        c.close()  # the shared embedder passed to open_container stays open


def build_store(conv: Conversation, root: Path, embedder: Embedder | None, *, context_turns: int = 2) -> StoreInfo:
    """The store of ``conv`` under ``root/conv.id``: reused when its marker matches, else
    (re)built from scratch. Returns its home and the id maps.

    Raises:
        StorageError: SQLite failed.
    """
    home = root / conv.id
    marker = home / MARKER
    want = {"model": embedder.model_id if embedder is not None else None, "context_turns": context_turns}
    if marker.is_file():
        try:
            have = json.loads(marker.read_text())
        except (OSError, ValueError):
            have = {}
        if {k: have.get(k) for k in want} == want:
            with open_store(home, embedder) as c:
                info = _info(home, c)
            if len(info.id_to_dia) == have.get("memories"):
                return info
    if home.exists():
        shutil.rmtree(home)
    with open_store(home, embedder) as c:
        c.memories.remember_many(turn_inputs(conv, context_turns))
        info = _info(home, c)
    marker.write_text(json.dumps({**want, "memories": len(info.id_to_dia)}))
    return StoreInfo(info.home, info.id_to_dia, info.seq_to_dia, built=True)


def _info(home: Path, c: Container) -> StoreInfo:
    rows = c.db.read(mem_sql.live_metadata)
    dia = {int(r[0]): json.loads(r[2])["dia_id"] for r in rows}
    return StoreInfo(home, {r[1]: dia[int(r[0])] for r in rows}, dia)
