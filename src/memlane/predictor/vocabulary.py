"""Which project a memory that names none is about: each project's distinctive vocabulary.

Schema v5's ``shares_project_vocabulary`` / ``shares_other_project_vocabulary``. A project's
notes carry words no other project's notes use: its tools, hosts, tables and files
("fly.io", "alembic", "journal_entries", ".gitlab-ci.yml"). A note that is stored under no
project and names none ("Deploys go out via make release to fly.io; ...") is still about one,
and ``mentions_project`` / ``names_other_project`` cannot see which. Here the memories that are
stored under exactly one project or name exactly one teach that project's vocabulary; a token
is *distinctive* of a project when at least :data:`MIN_DISTINCTIVE_DF` of its memories contain
it and no other project's memory does. A memory that names no project then shares the
session's project's vocabulary (it contains one of its distinctive tokens) or another
project's (one of theirs), or both, or neither.

docs/predictor.md, "Project vocabulary", has what the two flags gain, against an oracle of
each note's true project and a naive-Bayes posterior over the named notes' words (not kept).

As of a session: only memories created before the session's start count, and a project
counts as named only if the user had started a session in it before (or it is the session's
own), the cut-off of ``names_other_project``. :class:`VocabularyCache` keeps every live
memory's tokens and moves that cut-off incrementally, so the sidecar (one cache for its
lifetime, synced with the database on every score request) and training (one cache per
load, sessions newest first) compute the same values by the same code.
"""

from __future__ import annotations

import bisect
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from memlane.predictor.features import project_name
from memlane.storage import memories as mem_sql
from memlane.storage import predictor as pred_sql
from memlane.storage.fts import STOP_WORDS

__all__ = ["MIN_DISTINCTIVE_DF", "VocabularyCache", "tokens"]

#: Memories of one project that must contain a token before it counts as that project's.
MIN_DISTINCTIVE_DF = 2

_TOKEN = re.compile(r"[a-z0-9][a-z0-9._-]*[a-z0-9]")


def tokens(text: str) -> frozenset[str]:
    """Lower-cased word tokens of ``text`` (2+ chars of ``[a-z0-9._-]``, starting and ending
    alphanumeric: "fly.io." at the end of a sentence is "fly.io"), without the BM25 leg's
    English stop words (:data:`memlane.storage.fts.STOP_WORDS`): function words two notes of a
    small store can share by chance are never a project's vocabulary."""
    return frozenset(_TOKEN.findall(text.lower())) - STOP_WORDS


@dataclass(slots=True)
class _Memory:
    key: tuple[str, int]  # (created_at ISO, seq): the sort order of the cut-off
    id: str
    stored: str | None  # project_name of the stored project
    text: str  # lower-cased content
    toks: frozenset[str]
    owner: str | None = None  # the project (name) whose vocabulary it teaches, while included


class VocabularyCache:
    """Live memories' tokens and, for one cut-off, each token's count per project.

    ``signals(...)`` is the entry point; ``sync(conn)`` brings the memories up to date with
    the database (new rows by ``seq``, edited or deleted ones by ``updated_at``, anything
    removed outright by a full reload). Not thread-safe: one per sidecar / per training load.
    """

    def __init__(self) -> None:
        self._mem: dict[int, _Memory] = {}
        self._seq: dict[str, int] = {}  # memory id -> seq
        self._order: list[tuple[str, int]] = []  # keys of self._mem, sorted
        self._max_seq = 0
        self._max_updated = ""
        self._held: dict[int, str] = {}  # seq -> updated_at as last read (deleted rows too)
        self._cutoff: str | None = None  # memories with created_at < cutoff are included
        self._names: frozenset[str] = frozenset()  # project names that count as named
        self._k = 0  # number of included memories: self._order[:self._k]
        self._df: dict[str, dict[str, int]] = {}  # token -> {project name: included memories}

    # -- the database --------------------------------------------------------------------
    def sync(self, conn: sqlite3.Connection) -> None:
        """Apply the database's changes since the last sync (the first call loads everything).

        Raises:
            sqlite3.Error: the read failed (the cache is then reloaded on the next call).
        """
        try:
            if self._mem:  # edits and soft deletes of rows held: re-read the rows whose mark moved
                moved = [
                    seq
                    for seq, at in pred_sql.updated_since(conn, self._max_updated, self._max_seq)
                    if self._held.get(seq) != at
                ]
                if moved:
                    self._apply(pred_sql.vocabulary_rows(conn, seqs=moved))
            self._apply(pred_sql.vocabulary_rows(conn, after_seq=self._max_seq))
            if mem_sql.live_count(conn) != len(self._mem):
                self._reset()  # a row was removed outright (not soft-deleted): reload everything
                self._apply(pred_sql.vocabulary_rows(conn, after_seq=0))
        except sqlite3.Error:
            self._reset()
            raise

    def _apply(self, rows: list[pred_sql.VocabularyRow]) -> None:
        for r in rows:
            self._max_seq = max(self._max_seq, r.seq)
            self._max_updated = max(self._max_updated, r.updated_at or "")
            self._drop(r.seq)
            self._held[r.seq] = r.updated_at or ""
            if not r.is_deleted:
                self._put(r)

    def _reset(self) -> None:
        self.__init__()  # type: ignore[misc]

    def _put(self, r: pred_sql.VocabularyRow) -> None:
        m = _Memory(
            (r.created_at, r.seq), r.id, project_name(r.project), (r.content or "").lower(), tokens(r.content or "")
        )
        self._mem[r.seq] = m
        self._seq[r.id] = r.seq
        pos = bisect.bisect_left(self._order, m.key)
        self._order.insert(pos, m.key)
        if self._cutoff is not None and m.key[0] < self._cutoff:
            self._k += 1
            self._include(m)

    def _drop(self, seq: int) -> None:
        m = self._mem.pop(seq, None)
        if m is None:
            return
        self._seq.pop(m.id, None)
        pos = bisect.bisect_left(self._order, m.key)
        del self._order[pos]
        if pos < self._k:
            self._k -= 1
            self._exclude(m)

    # -- the cut-off ---------------------------------------------------------------------
    def _owner(self, m: _Memory) -> str | None:
        if m.stored is not None:
            return m.stored
        named = [n for n in self._names if n in m.text]
        return named[0] if len(named) == 1 else None

    def _include(self, m: _Memory) -> None:
        m.owner = self._owner(m)
        if m.owner is None:
            return
        for t in m.toks:
            if t not in self._names:
                per = self._df.setdefault(t, {})
                per[m.owner] = per.get(m.owner, 0) + 1

    def _exclude(self, m: _Memory) -> None:
        if m.owner is None:
            return
        for t in m.toks:
            per = self._df.get(t)
            if per is None or m.owner not in per:
                continue
            per[m.owner] -= 1
            if per[m.owner] <= 0:
                del per[m.owner]
                if not per:
                    del self._df[t]
        m.owner = None

    def _move_to(self, cutoff: str, names: frozenset[str]) -> None:
        if names != self._names:
            self._names, self._df, self._k = names, {}, 0
            for m in self._mem.values():
                m.owner = None
        k = bisect.bisect_left(self._order, (cutoff, -1))
        while self._k < k:
            self._include(self._mem[self._order[self._k][1]])
            self._k += 1
        while self._k > k:
            self._k -= 1
            self._exclude(self._mem[self._order[self._k][1]])
        self._cutoff = cutoff

    # -- the signals ---------------------------------------------------------------------
    def signals(
        self, ids: Iterable[str], *, project: str | None, cutoff: str, known_projects: Iterable[str]
    ) -> dict[str, tuple[bool, bool]]:
        """``{memory id: (shares_project_vocabulary, shares_other_project_vocabulary)}``.

        Args:
            ids: the candidates' memory ids (unknown or deleted ones: both False).
            project: the session's project (None: every flag False).
            cutoff: ISO-8601 UTC, the session's start; memories created at or after it do not
                teach any vocabulary.
            known_projects: the projects the user had started a session in before ``cutoff``
                (their names count as naming them; the session's own counts too).

        A candidate stored under a project or naming one of those gets (False, False): the
        ``mentions_project`` / ``names_other_project`` flags already say which.
        """
        ids = list(ids)
        own = project_name(project)
        if own is None:
            return {i: (False, False) for i in ids}
        names = frozenset(n for p in known_projects if (n := project_name(p)) is not None) | {own}
        self._move_to(cutoff, names)
        out: dict[str, tuple[bool, bool]] = {}
        for i in ids:
            m = self._mem.get(self._seq.get(i, -1))
            if m is None or m.stored is not None or any(n in m.text for n in names):
                out[i] = (False, False)
                continue
            mine = other = False
            for t in m.toks:
                per = self._df.get(t)
                if per is not None and len(per) == 1:
                    ((proj, count),) = per.items()
                    if count >= MIN_DISTINCTIVE_DF:
                        if proj == own:
                            mine = True
                        else:
                            other = True
            out[i] = (mine, other)
        return out
