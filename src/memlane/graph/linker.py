"""The inline entity linker (memory-pipeline-v2.md "Inline Entity Linker", "Decision
Auto-Protection").

Runs INSIDE the remember write transaction (a ``MemoryService.created_hooks`` hook): regex
matching and SQLite writes only, no network, no LLM, no file I/O. For one memory it

1. finds candidate entity names: runs of capitalised / CamelCase words and short acronyms
   (``Postgres``, ``React Native``, ``GitHub``, ``AWS``), and backtick-quoted identifiers
   (```memlane```), skipping common words; at most :data:`MAX_NAMES`;
2. resolves each against ``entities.canonical_name`` (inserting new ones as type ``extracted``)
   and links the memory through ``memory_entity_mentions`` with confidence
   :data:`LINKER_CONFIDENCE`;
3. splits the content into clauses (sentences and list items); the first (longest) entity named
   in a clause gets the rest of the clause as an attribute, under an aspect inferred from its
   verbs (``preferences``, ``decisions``, ``events``...);
4. decision auto-protection: when the content matches the 14-pattern battery
   (:mod:`memlane.graph.protection`) every attribute is written as ``kind='constraint'`` with
   importance 0.85, otherwise ``attribute`` / 0.5.

Only the first :data:`SCAN_CHARS` characters are scanned, so a 100 KB memory costs the same as a
20 KB one. The hook runs in a SAVEPOINT and never raises: a linker bug cannot lose a remember.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from memlane.config.pipeline import GraphSettings
from memlane.graph import names, store
from memlane.graph.protection import protection_for
from memlane.storage import graph as graph_sql
from memlane.storage.db import savepoint
from memlane.storage.models import NewMemory

log = logging.getLogger(__name__)

#: Confidence of a linker mention (regex, no model).
LINKER_CONFIDENCE = 0.8
#: Confidence of a linker attribute.
ATTRIBUTE_CONFIDENCE = 0.7
#: Characters of content scanned.
SCAN_CHARS = 20_000
#: Entity names linked per memory.
MAX_NAMES = 20
#: Words in one multi-word name.
MAX_NAME_WORDS = 4
#: Clause text kept as an attribute, characters; shorter than MIN_PREDICATE_CHARS is dropped.
MAX_PREDICATE_CHARS = 200
MIN_PREDICATE_CHARS = 5

#: Capitalised words that are not names (lowercase). Sentence-initial capitals pass unless listed.
SKIP_WORDS: frozenset[str] = frozenset(
    [
        "a",
        "an",
        "the",
        "this",
        "that",
        "these",
        "those",
        "there",
        "then",
        "than",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "whose",
        "why",
        "how",
        "here",
        "i",
        "im",
        "i'm",
        "ive",
        "i've",
        "id",
        "i'd",
        "ill",
        "i'll",
        "me",
        "my",
        "mine",
        "we",
        "we're",
        "weve",
        "we've",
        "our",
        "ours",
        "us",
        "you",
        "your",
        "yours",
        "youre",
        "you're",
        "he",
        "she",
        "it",
        "its",
        "it's",
        "they",
        "them",
        "their",
        "theirs",
        "his",
        "her",
        "hers",
        "one",
        "ones",
        "someone",
        "something",
        "anything",
        "everything",
        "nothing",
        "have",
        "has",
        "had",
        "having",
        "do",
        "does",
        "did",
        "done",
        "doing",
        "be",
        "been",
        "being",
        "is",
        "are",
        "was",
        "were",
        "am",
        "will",
        "would",
        "shall",
        "should",
        "can",
        "could",
        "may",
        "might",
        "must",
        "not",
        "no",
        "nor",
        "yes",
        "ok",
        "okay",
        "but",
        "and",
        "or",
        "for",
        "yet",
        "so",
        "if",
        "else",
        "also",
        "just",
        "only",
        "very",
        "really",
        "quite",
        "rather",
        "still",
        "already",
        "even",
        "never",
        "always",
        "often",
        "sometimes",
        "usually",
        "maybe",
        "perhaps",
        "please",
        "thanks",
        "thank",
        "some",
        "any",
        "all",
        "each",
        "every",
        "both",
        "few",
        "more",
        "most",
        "many",
        "much",
        "other",
        "another",
        "such",
        "same",
        "different",
        "own",
        "about",
        "after",
        "before",
        "between",
        "during",
        "since",
        "until",
        "into",
        "onto",
        "from",
        "with",
        "without",
        "through",
        "across",
        "along",
        "around",
        "behind",
        "below",
        "above",
        "under",
        "over",
        "near",
        "next",
        "last",
        "first",
        "second",
        "third",
        "new",
        "old",
        "good",
        "great",
        "best",
        "well",
        "bad",
        "better",
        "long",
        "high",
        "low",
        "big",
        "small",
        "large",
        "little",
        "important",
        "sure",
        "true",
        "false",
        "right",
        "left",
        "up",
        "down",
        "out",
        "off",
        "on",
        "in",
        "at",
        "by",
        "to",
        "of",
        "as",
        "note",
        "notes",
        "todo",
        "fixme",
        "tip",
        "warning",
        "important",
        "key",
        "facts",
        "preferences",
        "events",
        "relationships",
        "summary",
        "context",
        "however",
        "therefore",
        "thus",
        "moreover",
        "furthermore",
        "additionally",
        "meanwhile",
        "recently",
        "currently",
        "previously",
        "originally",
        "apparently",
        "specifically",
        "essentially",
        "generally",
        "typically",
        "particularly",
        "especially",
        "actually",
        "unfortunately",
        "fortunately",
        "certainly",
        "obviously",
        "basically",
        "exactly",
        "simply",
        "finally",
        "initially",
        "today",
        "tomorrow",
        "yesterday",
        "now",
        "later",
        "use",
        "uses",
        "used",
        "using",
        "add",
        "added",
        "adds",
        "fix",
        "fixed",
        "fixes",
        "run",
        "runs",
        "ran",
        "make",
        "makes",
        "made",
        "set",
        "sets",
        "get",
        "gets",
        "got",
        "see",
        "remember",
        "remembered",
        "decided",
        "chose",
        "chosen",
        "switched",
        "migrated",
        "picked",
        "prefer",
        "prefers",
        "preferred",
        "adopted",
        "went",
        "stick",
        "sticking",
        "committed",
        "settled",
        "user",
        "users",
        "let",
        "lets",
        "don't",
        "dont",
        "doesn't",
        "didn't",
        "can't",
        "cant",
        "won't",
        "isn't",
        "aren't",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
        "sunday",
        "january",
        "february",
        "march",
        "april",
        "june",
        "july",
        "august",
        "september",
        "october",
        "november",
        "december",
    ]
)

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_CLAUSE = re.compile(r"(?<=[.!?])\s+|\n+|\s+-\s+|;\s+")
_CAPITALISED = re.compile(r"^[A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9.+#-]*$")
_ACRONYM = re.compile(r"^[A-Z][A-Z0-9]{1,5}$")
_BACKTICK = re.compile(r"`([A-Za-z][\w.+#/-]{1,59})`")
_EDGE = "\"'()[]{}<>*_`"
_TRAIL = ",;:.!?"
_LEAD_JUNK = re.compile(r"^[\s,;:()\-]+|^(?:and|or|but|who|that|which)\s+", re.IGNORECASE)

#: Aspect inferred from a clause's verbs: the first pattern that matches wins, else "general".
ASPECT_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), a)
    for p, a in (
        (
            r"\b(?:decided|chose|chosen|switched|migrated|picked|settled|committed|adopted|went with|sticking with)\b",
            "decisions",
        ),
        (r"\b(?:likes?|loves?|enjoys?|prefers?|preferred|favou?rites?|hates?|dislikes?|avoids?)\b", "preferences"),
        (r"\b(?:plans?|intends?|wants? to|hopes? to|will|going to|roadmap)\b", "plans"),
        (r"\b(?:depends? on|requires?|needs?|uses?|runs? on|built with|integrates? with|talks? to)\b", "dependencies"),
        (r"\b(?:must|never|always|should not|shouldn't|do not|don't|forbidden|required)\b", "rules"),
        (r"\b(?:works? (?:at|on|for)|maintains?|owns?|leads?|manages?|reviews?)\b", "roles"),
        (r"\b(?:married|dating|friends? with|partner|colleague|team ?mate|reports? to)\b", "relationships"),
        (r"\b(?:born|grew up|lives? in|moved (?:to|from)|comes? from)\b", "background"),
        (r"\b(?:went|visited|attended|released|shipped|deployed|launched|broke|failed|happened)\b", "events"),
        (r"\b(?:thinks?|believes?|feels?|considers?|reali[sz]ed?)\b", "perspectives"),
        (r"\b(?:is|are|was|were|has|have|had|supports?|contains?|stores?)\b", "properties"),
    )
)


def infer_aspect(clause: str) -> str:
    """The aspect name for a clause (see :data:`ASPECT_PATTERNS`)."""
    for rx, aspect in ASPECT_PATTERNS:
        if rx.search(clause):
            return aspect
    return "general"


def candidate_names(text: str) -> list[str]:
    """Entity names found in ``text`` (first :data:`SCAN_CHARS` characters), in order of first
    appearance, distinct by canonical name, at most :data:`MAX_NAMES`."""
    text = text[:SCAN_CHARS]
    found: dict[str, str] = {}

    def keep(name: str) -> None:
        c = names.canonical_name(name)
        if c not in found and len(found) < MAX_NAMES:
            found[c] = name

    for m in _BACKTICK.finditer(text):
        keep(m.group(1))
    for sentence in _SENTENCE.split(text):
        run: list[str] = []
        for raw in sentence.split():
            word = raw.strip(_EDGE)
            core = word.rstrip(_TRAIL).strip(_EDGE)
            breaks_after = core != word or raw != word  # attached punctuation ends a name
            if _is_name_word(core) and len(run) < MAX_NAME_WORDS:
                run.append(core)
            else:
                _flush(run, keep)
                run = [core] if _is_name_word(core) else []
            if breaks_after:
                _flush(run, keep)
                run = []
        _flush(run, keep)
    return list(found.values())


def _is_name_word(word: str) -> bool:
    if not word or word.lower() in SKIP_WORDS:
        return False
    if _ACRONYM.match(word):
        return True
    return len(word) >= 3 and bool(_CAPITALISED.match(word))


def _flush(run: list[str], keep: Callable[[str], None]) -> None:
    if run:
        name = " ".join(run)
        if len(name) >= names.MIN_NAME_CHARS:
            keep(name)


@dataclass
class LinkResult:
    """What one memory's linking wrote."""

    entity_ids: list[str] = field(default_factory=list)
    linked: int = 0
    aspects: int = 0
    attributes: int = 0
    kind: str = "attribute"


def clauses(text: str, entity_names: list[str]) -> list[tuple[str, str, str]]:
    """``(entity name, predicate, aspect)`` per clause of ``text`` naming an entity: the
    first name in the clause (the longest on a tie) and the clause text after it (leading punctuation and
    conjunctions removed, at most :data:`MAX_PREDICATE_CHARS` chars)."""
    out = []
    for seg in _CLAUSE.split(text[:SCAN_CHARS]):
        seg = seg.strip()
        if len(seg) <= 10:
            continue
        hits = [(i, -len(n), n) for n in entity_names if (i := seg.find(n)) >= 0]
        if not hits:
            continue
        i, _, name = min(hits)
        pred = _LEAD_JUNK.sub("", seg[i + len(name) :].strip(_EDGE + " ")).strip().rstrip(".!?")
        if len(pred) >= MIN_PREDICATE_CHARS:
            pred = pred[:MAX_PREDICATE_CHARS]
            out.append((name, pred, infer_aspect(pred)))
    return out


def link_memory(conn: sqlite3.Connection, memory_id: str, content: str, at: str) -> LinkResult:
    """Link one memory to the entities in its content, with aspects and attributes (SQL only,
    on the caller's write transaction).

    Raises:
        sqlite3.Error: a write failed (:func:`linker_hook` contains it).
    """
    result = LinkResult()
    found = candidate_names(content)
    if not found:
        return result
    ids: dict[str, str] = {}
    for name in found:
        eid = store.resolve_entity(conn, name, at=at)
        if eid is None:
            continue
        ids[name] = eid
        result.entity_ids.append(eid)
        result.linked += store.link_memory(
            conn, memory_id=memory_id, entity_id=eid, mention_text=name, confidence=LINKER_CONFIDENCE, at=at
        )
    kind, importance = protection_for(content)
    result.kind = kind
    for name, pred, aspect in clauses(content, list(ids)):
        eid = ids[name]
        aspect_id = graph_sql.upsert_aspect(
            conn, aspect_id=str(uuid.uuid4()), entity_id=eid, name=aspect, canonical=names.canonical_name(aspect), at=at
        )
        result.aspects += 1
        normalized = names.canonical_name(pred)
        if graph_sql.active_attribute_exists(conn, eid, aspect_id, normalized):
            continue
        graph_sql.insert_attribute(
            conn,
            attribute_id=str(uuid.uuid4()),
            entity_id=eid,
            aspect_id=aspect_id,
            memory_id=memory_id,
            kind=kind,
            content=pred,
            normalized=normalized,
            confidence=ATTRIBUTE_CONFIDENCE,
            importance=importance,
            source="linker",
            at=at,
        )
        result.attributes += 1
    return result


def linker_hook(graph: Callable[[], GraphSettings]) -> Callable[[sqlite3.Connection, NewMemory, str], None]:
    """A ``MemoryService.created_hooks`` entry: link each created memory while
    ``graph().enabled`` (read per memory). Failures roll back to a savepoint and are logged;
    the memory row stays."""

    def hook(conn: sqlite3.Connection, new: NewMemory, at: str) -> None:
        if not graph().enabled:
            return
        try:
            with savepoint(conn, "inline_linker"):
                link_memory(conn, new.id, new.content, at)
        except Exception:
            log.exception("inline entity linker failed on memory %s", new.id)

    return hook
