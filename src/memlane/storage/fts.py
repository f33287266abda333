"""The BM25 leg over FTS5, with query sanitisation.

Any string is a valid query: it is reduced to its word tokens (Unicode letters and digits,
the same split as FTS5's ``unicode61`` tokenizer), English stop words are dropped (unless
nothing else is left), each token is emitted as a double-quoted FTS5 string and the tokens
are OR-ed. Quotes, FTS operators (AND, NEAR, ``*``, ``^``, column filters) and SQL never
reach the FTS parser as syntax, and every value is bound as a parameter.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

_TOKEN = re.compile(r"[^\W_]+", re.UNICODE)

#: Most tokens a query contributes to the FTS expression (a 100 KB query stays cheap).
MAX_QUERY_TOKENS = 64

STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "s",
        "t",
        "d",
        "ll",
        "m",
        "re",
        "ve",
        "don",
        "did",
        "didn",
        "doesn",
        "isn",
        "wasn",
        "weren",
        "won",
        "wouldn",
        "shouldn",
        "couldn",
        "let",
        "us",
        "also",
        "ever",
        "get",
        "got",
    ]
)


def query_tokens(query: str) -> list[str]:
    """Word tokens of ``query``: lowercased, deduplicated in order, stop words removed
    (kept if they are all there is), at most MAX_QUERY_TOKENS."""
    seen: dict[str, None] = {}
    for tok in _TOKEN.findall(query.lower()):
        if tok not in seen:
            seen[tok] = None
    tokens = list(seen)
    content = [t for t in tokens if t not in STOP_WORDS]
    return (content or tokens)[:MAX_QUERY_TOKENS]


def match_expression(query: str) -> str | None:
    """A safe FTS5 MATCH expression for any string, or None when it has no word tokens."""
    tokens = query_tokens(query)
    if not tokens:
        return None
    return " OR ".join(f'"{t}"' for t in tokens)


@dataclass(frozen=True, slots=True)
class Filters:
    """Recall filters shared by both legs. Times are ISO-8601 UTC strings, ``until`` exclusive."""

    project: str | None = None
    types: tuple[str, ...] = ()
    since: str | None = None
    until: str | None = None
    include_deleted: bool = False
    include_global: bool = False  # with a project: also memories that have no project
    exclude_superseded: bool = False

    def sql(self, alias: str = "m") -> tuple[str, list]:
        """A WHERE fragment (starting with AND, possibly empty) and its parameters."""
        parts, args = [], []
        if not self.include_deleted:
            parts.append(f"{alias}.is_deleted = 0")
        if self.project is not None:
            if self.include_global:
                parts.append(f"({alias}.project = ? OR {alias}.project IS NULL)")
            else:
                parts.append(f"{alias}.project = ?")
            args.append(self.project)
        if self.exclude_superseded:
            parts.append(f"{alias}.superseded_by IS NULL")
        if self.types:
            parts.append(f"{alias}.type IN ({','.join('?' * len(self.types))})")
            args.extend(self.types)
        if self.since is not None:
            parts.append(f"{alias}.created_at >= ?")
            args.append(self.since)
        if self.until is not None:
            parts.append(f"{alias}.created_at < ?")
            args.append(self.until)
        return ("".join(f" AND {p}" for p in parts), args)


def search(
    conn: sqlite3.Connection,
    query: str,
    *,
    limit: int,
    filters: Filters,
    context_weight: float = 0.5,
    raw_expr: bool = False,
) -> list[tuple[int, float]]:
    """BM25 search: ``(seq, score)`` pairs, best first, scores normalised to [0, 1].

    FTS5's ``bm25()`` is negative (more negative = better); each score is divided by the
    best score of the result set, so the top hit is 1.0 and order is preserved (the seed's
    ``1 / (1 + |score|)`` would invert the order, so it is not used). Column weights:
    normalized_content 1.0, context ``context_weight``.
    """
    expr = query if raw_expr else match_expression(query)
    if expr is None or limit <= 0:
        return []
    where, args = filters.sql("m")
    rows = conn.execute(
        f"""SELECT m.seq, bm25(memories_fts, 1.0, ?) AS s
            FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid
            WHERE memories_fts MATCH ?{where}
            ORDER BY s LIMIT ?""",
        (float(context_weight), expr, *args, int(limit)),
    ).fetchall()
    return normalise([(int(r[0]), float(r[1])) for r in rows])


def search_raw(
    conn: sqlite3.Connection, expr: str, *, limit: int, context_weight: float = 0.5
) -> list[tuple[int, float]]:
    """FTS5 alone (no join, no filters): ``(seq, bm25)`` pairs, best (most negative) first.

    ``expr`` comes from :func:`match_expression`. The caller filters with the in-memory index
    and normalises; this skips a B-tree lookup into ``memories`` per matching row.
    """
    return [
        (int(r[0]), float(r[1]))
        for r in conn.execute(
            """SELECT rowid, bm25(memories_fts, 1.0, ?) AS s FROM memories_fts
           WHERE memories_fts MATCH ? ORDER BY s LIMIT ?""",
            (float(context_weight), expr, int(limit)),
        )
    ]


def normalise(rows: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Divide bm25 scores by the best one: the top hit is 1.0, order kept, all in [0, 1]."""
    if not rows:
        return []
    best = rows[0][1]
    if best >= 0:  # degenerate (all zero): equal scores
        return [(s, 1.0) for s, _ in rows]
    return [(s, v / best) for s, v in rows]


def integrity_ok(conn: sqlite3.Connection) -> bool:
    """True when the FTS index agrees with the memories table.

    FTS5's integrity-check is issued as an INSERT, so run this as a write job
    (``db.write(integrity_ok)``); on a read-only connection it always fails.
    """
    try:
        conn.execute("INSERT INTO memories_fts(memories_fts, rank) VALUES ('integrity-check', 1)")
        return True
    except sqlite3.DatabaseError:
        return False
