"""Loader for the LoCoMo long-term conversational memory benchmark: the learned ranker's training
data (``memlane train ranker``, :mod:`memlane.ranker.stores`); the benchmarks read it too.

Source: Maharana et al., "Evaluating Very Long-Term Conversational Memory of
LLM Agents", ACL 2024; data file ``data/locomo10.json`` from
github.com/snap-research/LoCoMo (CC BY-NC 4.0). See
``/work/shared/bench-data/MANIFEST.md`` for the shape and known quirks.

Only raw dialogue turns are loaded; the LLM-generated ``observation``,
``session_summary`` and ``event_summary`` fields are ignored. Pure code: no
database, no network.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from memlane.ranker.features import MONTH_NAMES

__all__ = [
    "CATEGORY_NAMES",
    "Conversation",
    "Question",
    "Turn",
    "load_locomo",
    "normalize_evidence",
    "parse_session_datetime",
    "summary",
]

#: LoCoMo question categories by id (MANIFEST.md).
CATEGORY_NAMES: dict[int, str] = {
    1: "multi-hop",
    2: "temporal",
    3: "open-domain",
    4: "single-hop",
    5: "adversarial",
}

_SESSION_KEY = re.compile(r"session_(\d+)")
_DATE = re.compile(
    r"\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+)\.?,?\s+(\d{4})\s*",
    re.IGNORECASE,
)
_MONTHS = {m: i for i, name in enumerate(MONTH_NAMES, start=1) for m in (name, name[:3])}
_MONTHS["sept"] = 9
# "D11:26", "D:11:26", "D30:05", "d 3 : 7" -> (session, turn)
_EVIDENCE_ID = re.compile(r"[Dd]\s*:?\s*(\d+)\s*:\s*(\d+)")
_EVIDENCE_SPLIT = re.compile(r"[;,\s]+")


@dataclass(frozen=True)
class Turn:
    """One raw dialogue turn.

    ``text`` is ``"{speaker}: {text}"`` plus ``" [image: {blip_caption}]"``
    when the turn shares an image. ``index`` is the 0-based position within
    its session; ``timestamp`` is the session date (naive, treated as UTC)
    plus ``index`` seconds, so turns are strictly ordered within a session.
    """

    conversation_id: str
    dia_id: str
    session: int
    index: int
    speaker: str
    text: str
    timestamp: datetime


@dataclass(frozen=True)
class Question:
    """One QA item. ``index`` is its 0-based position in the ``qa`` list.

    ``evidence`` holds normalized dia_ids that resolve to a turn of the same
    conversation (order kept, duplicates removed); ``dropped_evidence`` counts
    raw ids that could not be resolved.
    """

    conversation_id: str
    index: int
    question: str
    category: int
    evidence: tuple[str, ...]
    dropped_evidence: int
    answer: str | None = None  # the gold answer (``adversarial_answer`` for category 5)


@dataclass
class Conversation:
    """A LoCoMo sample: turns in session order, then turn order."""

    id: str
    turns: list[Turn] = field(default_factory=list)
    questions: list[Question] = field(default_factory=list)

    @property
    def last_timestamp(self) -> datetime:
        """Timestamp of the latest turn (naive UTC). Raises ValueError if empty."""
        if not self.turns:
            raise ValueError(f"conversation {self.id!r} has no turns")
        return max(t.timestamp for t in self.turns)

    @property
    def sessions(self) -> list[int]:
        """Distinct session numbers that have at least one turn, ascending."""
        return sorted({t.session for t in self.turns})


def parse_session_datetime(value: str) -> datetime:
    """Parse a LoCoMo session date such as ``"1:56 pm on 8 May, 2023"``.

    Returns a naive datetime (interpreted as UTC). Locale independent.
    Raises ValueError on anything else.
    """
    m = _DATE.fullmatch(value)
    if not m:
        raise ValueError(f"unrecognised LoCoMo date/time {value!r}")
    hour, minute, ampm, day, month_name, year = m.groups()
    month = _MONTHS.get(month_name.lower())
    h = int(hour)
    if month is None or not 1 <= h <= 12:
        raise ValueError(f"unrecognised LoCoMo date/time {value!r}")
    h = h % 12 + (12 if ampm.lower() == "p" else 0)
    return datetime(int(year), month, int(day), h, int(minute))


def _repair_evidence_id(token: str) -> str | None:
    """Canonical ``D{session}:{turn}`` (no leading zeros) or None if hopeless."""
    m = _EVIDENCE_ID.fullmatch(token)
    if not m:
        return None
    return f"D{int(m.group(1))}:{int(m.group(2))}"


def normalize_evidence(raw: Iterable[str], valid: set[str]) -> tuple[list[str], int]:
    """Normalize a question's raw evidence list against the conversation's turns.

    Each raw entry is split on ``;``, ``,`` and whitespace ("D8:6; D9:17" ->
    two ids); each token is repaired to the canonical ``D{s}:{t}`` form
    ("D:11:26" -> "D11:26", "D30:05" -> "D30:5"). Tokens that cannot be
    repaired (e.g. "D") or do not name a turn in ``valid`` are dropped.

    Returns ``(ids, dropped)``: resolvable ids in first-occurrence order with
    duplicates removed (duplicates are not counted as dropped), and the number
    of non-empty tokens that were dropped.
    """
    out: list[str] = []
    seen: set[str] = set()
    dropped = 0
    for entry in raw:
        for token in _EVIDENCE_SPLIT.split(str(entry)):
            if not token:
                continue
            fixed = _repair_evidence_id(token)
            if fixed is None or fixed not in valid:
                dropped += 1
            elif fixed not in seen:
                seen.add(fixed)
                out.append(fixed)
    return out, dropped


def _turn_text(raw: dict[str, Any]) -> str:
    text = f"{raw['speaker']}: {raw['text']}"
    caption = raw.get("blip_caption")
    if caption:
        text += f" [image: {caption}]"
    return text


def _load_conversation(sample: Any, where: str) -> Conversation:
    if not isinstance(sample, dict):
        raise ValueError(f"{where}: expected an object, got {type(sample).__name__}")
    missing = [k for k in ("sample_id", "conversation", "qa") if k not in sample]
    if missing:
        raise ValueError(f"{where}: missing key(s) {missing}")
    conv_id = str(sample["sample_id"])
    body = sample["conversation"]
    if not isinstance(body, dict) or not isinstance(sample["qa"], list):
        raise ValueError(f"{where}: 'conversation' must be an object and 'qa' a list")

    sessions = sorted(
        (int(m.group(1)), key) for key in body if (m := _SESSION_KEY.fullmatch(key)) and isinstance(body[key], list)
    )
    if not sessions:
        raise ValueError(f"{where}: no session_N turn lists")
    turns: list[Turn] = []
    for number, key in sessions:
        if not body[key]:
            continue
        date_raw = body.get(f"{key}_date_time")
        if not isinstance(date_raw, str):
            raise ValueError(f"{where}: {key} has no {key}_date_time")
        try:
            start = parse_session_datetime(date_raw)
        except ValueError as exc:
            raise ValueError(f"{where}: {key}_date_time: {exc}") from None
        for i, raw in enumerate(body[key]):
            if not isinstance(raw, dict) or not all(isinstance(raw.get(k), str) for k in ("speaker", "dia_id", "text")):
                raise ValueError(f"{where}: {key}[{i}] lacks speaker/dia_id/text strings")
            turns.append(
                Turn(conv_id, raw["dia_id"], number, i, raw["speaker"], _turn_text(raw), start + timedelta(seconds=i))
            )

    valid = {t.dia_id for t in turns}
    questions: list[Question] = []
    for qi, q in enumerate(sample["qa"]):
        if not isinstance(q, dict) or "question" not in q or "category" not in q:
            raise ValueError(f"{where}: qa[{qi}] lacks question/category")
        raw_ev = q.get("evidence") or []
        if isinstance(raw_ev, str):
            raw_ev = [raw_ev]
        evidence, dropped = normalize_evidence(raw_ev, valid)
        answer = q.get("answer", q.get("adversarial_answer"))
        questions.append(
            Question(
                conv_id,
                qi,
                str(q["question"]),
                int(q["category"]),
                tuple(evidence),
                dropped,
                None if answer is None else str(answer),
            )
        )
    return Conversation(conv_id, turns, questions)


def load_locomo(path: str | Path) -> list[Conversation]:
    """Load ``locomo10.json`` into Conversations (raw turns + questions).

    Sessions are ordered by their number N (``session_N``), not by key order;
    ``session_N_date_time`` keys without a turn list are ignored. Raises
    ValueError naming ``path`` if the file is not valid JSON or not
    LoCoMo-shaped; FileNotFoundError if it does not exist.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not a LoCoMo file (invalid JSON: {exc})") from None
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: not a LoCoMo file (expected a non-empty JSON list of samples)")
    return [_load_conversation(s, f"{path}: sample {i}") for i, s in enumerate(data)]


def summary(convs: Iterable[Conversation]) -> dict[str, Any]:
    """Counts for a loaded benchmark.

    Keys: ``conversations``, ``sessions`` (distinct non-empty sessions),
    ``turns``, ``questions``, ``questions_per_category`` ({category id: n},
    ascending), ``questions_without_evidence`` (after normalization) and
    ``dropped_evidence`` (total unresolvable raw evidence ids).
    """
    convs = list(convs)
    cats = Counter(q.category for c in convs for q in c.questions)
    return {
        "conversations": len(convs),
        "sessions": sum(len(c.sessions) for c in convs),
        "turns": sum(len(c.turns) for c in convs),
        "questions": sum(len(c.questions) for c in convs),
        "questions_per_category": dict(sorted(cats.items())),
        "questions_without_evidence": sum(1 for c in convs for q in c.questions if not q.evidence),
        "dropped_evidence": sum(q.dropped_evidence for c in convs for q in c.questions),
    }
