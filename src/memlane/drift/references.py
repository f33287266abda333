"""A memory's references, extracted from its text, and their resolution rules (docs/drift.md).

Extracted when a memory is written or updated:

* ``[[name]]`` wiki links, URLs and document ids (UUIDs) -> ``document`` references, when they
  resolve to a live ingested document (:func:`resolve_document`);
* file paths (``src/app.py``, ``./docs/x.md``, an absolute path under the project root) ->
  ``file`` references, relative to the memory's project root, kept only when the project root
  is a directory and the file or directory exists at the time (a word such as ``e.g`` never
  becomes a reference).

Resolution of a document reference (never a substring match):

1. a UUID: the live document with that id;
2. a URL: the live document whose ``source_url`` equals it (scheme and host case-folded,
   fragment and trailing ``/`` dropped); several (re-ingests): the newest;
3. a wiki name: live documents whose title equals the name (case-insensitive), else those whose
   URL path ends with the name on a segment boundary (extension and trailing ``/`` dropped).
   Re-ingests of one URL count once (newest). Exactly one left: it. Several: the one whose URL
   path has the fewest segments when that count is unique (shortest unique path), else none
   (ambiguous: no reference rather than a wrong one).
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

WIKI_RE = re.compile(r"\[\[([^\[\]|#\n]{1,200})(?:[#|][^\[\]\n]*)?\]\]")
URL_RE = re.compile(r"https?://[^\s<>\"'`\]\)\}]+", re.IGNORECASE)
UUID_RE = re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE)
PATH_RE = re.compile(
    r"(?:(?<=^)|(?<=[\s`'\"(\[<]))((?:\.{1,2}/|/)?(?:[\w@+-][\w.@+-]*/)*[\w@+-][\w.@+-]*\.[A-Za-z0-9]{1,10})"
    r"(?=$|[\s`'\")\],:;!?>]|\.(?:\s|$))"
)
#: Most references kept per memory and kind (a pasted file listing is not 500 references).
MAX_PER_KIND = 50


@dataclass(frozen=True, slots=True)
class Candidate:
    """A reference as written: ``kind`` wiki | url | id | file, and its text."""

    kind: str
    raw: str


_EMPTY_BRACKETS = re.compile(r"\(\s*(?:[A-Za-z.]{1,6}\s*)?[,;:]?\s*\)|\[\s*\]")


def without_references(content: str) -> str:
    """``content`` with its wiki links, URLs and document ids removed, and a bracket left holding
    at most one short word (``(see )``, ``(cf. )``) dropped: the claim the memory makes, which
    drift compares with the document's sentences (the reference says where, not what)."""
    text = UUID_RE.sub(" ", URL_RE.sub(" ", WIKI_RE.sub(" ", content)))
    text = _EMPTY_BRACKETS.sub(" ", text)
    return re.sub(r"\s+([.,;:!?])", r"\1", " ".join(text.split()))


def extract(content: str) -> list[Candidate]:
    """Every reference-looking span of ``content``, in order, deduplicated."""
    out: dict[tuple[str, str], Candidate] = {}
    for m in WIKI_RE.finditer(content):
        name = m.group(1).strip()
        if name:
            out.setdefault(("wiki", name), Candidate("wiki", name))
    urls = [m.group(0).rstrip(".,;:!?") for m in URL_RE.finditer(content)]
    for u in urls:
        out.setdefault(("url", u), Candidate("url", u))
    for m in UUID_RE.finditer(content):
        out.setdefault(("id", m.group(0).lower()), Candidate("id", m.group(0).lower()))
    scrubbed = URL_RE.sub(" ", WIKI_RE.sub(" ", content))
    for m in PATH_RE.finditer(scrubbed):
        out.setdefault(("file", m.group(1)), Candidate("file", m.group(1)))
    return list(out.values())


def candidate_of(raw: str) -> Candidate:
    """The candidate a stored document reference's ``raw`` text came from (UUID, URL or wiki name)."""
    if UUID_RE.fullmatch(raw):
        return Candidate("id", raw.lower())
    if raw.lower().startswith(("http://", "https://")):
        return Candidate("url", raw)
    return Candidate("wiki", raw)


def relative_file(raw: str, root: str) -> str | None:
    """``raw`` as a POSIX path relative to ``root`` when it names an existing file or directory
    inside it, else None (outside the root, or missing)."""
    path = raw if os.path.isabs(raw) else os.path.join(root, raw)
    rel = os.path.relpath(os.path.normpath(path), root)
    if rel == "." or rel.startswith(".." + os.sep) or rel == "..":
        return None
    if not os.path.exists(os.path.join(root, rel)):
        return None
    return rel.replace(os.sep, "/")


def file_references(candidates: Sequence[Candidate], project: str | None) -> list[tuple[str, str]]:
    """``(raw, relative path)`` of the candidates that are existing files under ``project``."""
    if not project or not os.path.isabs(project) or not os.path.isdir(project):
        return []
    out: dict[str, str] = {}
    for c in candidates:
        if c.kind == "file" and len(out) < MAX_PER_KIND:
            rel = relative_file(c.raw, project)
            if rel is not None:
                out.setdefault(rel, c.raw)
    return [(raw, rel) for rel, raw in out.items()]


def normalise_url(url: str) -> str:
    """Scheme and host lower-cased, fragment and trailing ``/`` dropped."""
    try:
        p = urlsplit(url.strip())
    except ValueError:
        return url.strip()
    path = p.path.rstrip("/")
    return urlunsplit((p.scheme.lower(), p.netloc.lower(), path, p.query, ""))


def _url_path(url: str | None) -> str:
    if not url:
        return ""
    try:
        path = urlsplit(url).path
    except ValueError:
        return ""
    path = path.rstrip("/")
    stem, ext = posixpath.splitext(path)
    return (stem if ext and len(ext) <= 6 else path).lower()


@dataclass(frozen=True, slots=True)
class DocumentTable:
    """Live documents for resolution: ``(id, source_url, title, created_at)`` rows, oldest first."""

    rows: Sequence[tuple[str, str | None, str | None, str]]

    def resolve(self, cand: Candidate) -> str | None:
        """The document id a candidate resolves to (see the module docstring), else None."""
        if cand.kind == "id":
            return next((r[0] for r in self.rows if r[0] == cand.raw), None)
        if cand.kind == "url":
            want = normalise_url(cand.raw)
            hits = [r for r in self.rows if r[1] and normalise_url(r[1]) == want]
            return hits[-1][0] if hits else None
        if cand.kind != "wiki":
            return None
        name = cand.raw.strip().lower().strip("/")
        newest: dict[str, tuple[str, str | None, str | None, str]] = {}
        for r in self.rows:  # one per source: re-ingests of a URL count once (newest wins)
            newest[normalise_url(r[1]) if r[1] else r[0]] = r
        rows = list(newest.values())
        titled = [r for r in rows if r[2] and r[2].strip().lower() == name]
        if len(titled) == 1:
            return titled[0][0]
        pathed = [r for r in rows if (p := _url_path(r[1])) and (p == name or p.endswith("/" + name))]
        if len(pathed) == 1:
            return pathed[0][0]
        if len(pathed) > 1:
            depth = sorted((_url_path(r[1]).count("/"), r[0]) for r in pathed)
            if depth[0][0] != depth[1][0]:
                return depth[0][1]
        return None


def document_references(candidates: Sequence[Candidate], docs: DocumentTable) -> list[tuple[str, str]]:
    """``(raw, document id)`` of the candidates that resolve to a live document."""
    out: dict[str, str] = {}
    for c in candidates:
        if c.kind in ("wiki", "url", "id") and len(out) < MAX_PER_KIND:
            doc = docs.resolve(c)
            if doc is not None:
                out.setdefault(doc, c.raw)
    return [(raw, doc) for doc, raw in out.items()]
