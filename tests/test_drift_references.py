"""Reference extraction and the document resolution rules (docs/drift.md "References")."""

from __future__ import annotations

from memlane.drift.references import Candidate, DocumentTable, extract, file_references, normalise_url

DOCS = DocumentTable(
    [
        ("d1", "https://Example.org/docs/advanced/clients/", "Clients", "2026-01-01T00:00:00.000Z"),
        ("d2", "https://example.org/docs/api.md", None, "2026-01-02T00:00:00.000Z"),
        ("d3", "https://example.org/docs/advanced/clients#top", None, "2026-01-03T00:00:00.000Z"),  # re-ingest of d1
        ("d4", "https://a.org/index", None, "2026-01-04T00:00:00.000Z"),
        ("d5", "https://b.org/index", None, "2026-01-05T00:00:00.000Z"),
        ("d6", None, "Runbook", "2026-01-06T00:00:00.000Z"),
        ("d7", "https://c.org/guide/index", None, "2026-01-07T00:00:00.000Z"),
    ]
)


def test_extract_finds_links_urls_ids_and_paths():
    got = extract(
        "See [[clients|the clients page]] and https://example.org/docs/api.md, "
        "doc 12345678-1234-1234-1234-123456789ABC; edit `src/app.py` or ./docs/x.md."
    )
    assert [(c.kind, c.raw) for c in got] == [
        ("wiki", "clients"),
        ("url", "https://example.org/docs/api.md"),
        ("id", "12345678-1234-1234-1234-123456789abc"),
        ("file", "src/app.py"),
        ("file", "./docs/x.md"),
    ]


def test_url_resolution_is_exact_after_normalisation_and_newest_wins():
    assert normalise_url("HTTPS://Example.org/a/#x") == "https://example.org/a"
    assert DOCS.resolve(Candidate("url", "https://example.org/docs/advanced/clients")) == "d3"
    assert DOCS.resolve(Candidate("url", "https://example.org/docs/api.md")) == "d2"
    assert DOCS.resolve(Candidate("url", "https://example.org/docs/ap")) is None  # never a prefix match


def test_wiki_resolution_title_then_path_then_shortest_unique_path():
    assert DOCS.resolve(Candidate("wiki", "runbook")) == "d6"  # title, any case
    assert DOCS.resolve(Candidate("wiki", "clients")) == "d3"  # title of d1's source, newest re-ingest wins
    assert DOCS.resolve(Candidate("wiki", "docs/api")) == "d2"  # URL path, extension dropped
    assert DOCS.resolve(Candidate("wiki", "pi")) is None  # never a substring of a segment
    # /index at a.org and b.org tie (one segment each): ambiguous; c.org's is deeper
    assert DOCS.resolve(Candidate("wiki", "index")) is None
    assert DOCS.resolve(Candidate("wiki", "guide/index")) == "d7"
    assert DOCS.resolve(Candidate("id", "d5")) == "d5" and DOCS.resolve(Candidate("id", "zz")) is None


def test_shortest_unique_path_picks_the_shallower_page():
    t = DocumentTable([("x", "https://a.org/setup", None, "t1"), ("y", "https://a.org/old/setup", None, "t2")])
    assert t.resolve(Candidate("wiki", "setup")) == "x"


def test_file_references_exist_under_the_root_only(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("")
    cands = extract(f"src/app.py, src/gone.py, ../outside.py and {tmp_path}/src/app.py")
    assert file_references(cands, str(tmp_path)) == [("src/app.py", "src/app.py")]
    assert file_references(cands, None) == [] and file_references(cands, "relative/root") == []


def test_the_claim_is_the_text_without_its_references():
    from memlane.drift.references import without_references

    assert without_references("HTTPX is a client (see [[docs/index]]).") == "HTTPX is a client."
    assert without_references("See https://example.org/a#b for the API.") == "See for the API."
    assert (
        without_references("Owner (cf. 123e4567-e89b-12d3-a456-426614174000) left; keep (two words) here.")
        == "Owner left; keep (two words) here."
    )
    assert without_references("no reference at all") == "no reference at all"


def test_document_sentences_drop_the_markdown_and_split_list_items():
    from memlane.drift.sentences import split_sentences

    text = (
        "Request\n* Can be *constructed* for more _control_ over [the wire](http://x).\n"
        "* A `second` **item**\n\n```python\nx = 1\n```\n\nsnake_case_name stays. <b>Bold</b> tag."
    )
    assert split_sentences(text) == [
        "Request",
        "Can be constructed for more control over the wire.",
        "A second item",
        "snake_case_name stays.",
        "Bold tag.",
    ]
