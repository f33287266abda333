"""memlane.normalize against the seed's rules (memory-pipeline-v2.md, "Content Normalization").

storageContent = trim + collapse /\\s+/g to " " (casing kept); normalizedContent =
lowercase(storageContent) minus trailing [.,!?;:]+; contentHash = SHA-256 hex of
normalizedContent if non-empty, else of lowercase(storageContent).
"""

from __future__ import annotations

import hashlib
import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memlane.normalize import NormalizedContent, content_hash, normalize_and_hash

#: JavaScript's \s, spelled out (ECMA-262 WhiteSpace + LineTerminator): TAB LF VT FF CR,
#: the Zs category, LS, PS and the BOM.
JS_WHITESPACE = (
    "\t\n\x0b\x0c\r \u00a0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_JS_WS_RE = re.compile("[" + re.escape(JS_WHITESPACE) + "]+")
PUNCT = ".,!?;:"
HEX64 = re.compile(r"[0-9a-f]{64}")


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def oracle(content: str) -> NormalizedContent:
    """An independent transcription of the seed's normalizeAndHashContent."""
    storage = _JS_WS_RE.sub(" ", content)
    # JS String.prototype.trim removes exactly the \s characters; after the collapse only " " is left.
    storage = storage.strip(" ")
    normalized = re.sub(r"[.,!?;:]+\Z", "", storage.lower())
    return NormalizedContent(storage, normalized, sha(normalized or storage.lower()))


#: Any text, including lone surrogates, NUL and control characters.
any_text = st.text(st.one_of(st.characters(codec=None), st.sampled_from(list(JS_WHITESPACE + PUNCT))))
#: Text with no whitespace of any kind (JS or Python), for building words.
word = st.text(
    st.characters(codec="utf-8", exclude_characters=JS_WHITESPACE + "\x1c\x1d\x1e\x1f\x85"),
    min_size=1,
    max_size=12,
)
ws_run = st.text(st.sampled_from(list(JS_WHITESPACE)), min_size=1, max_size=5)


# -- hand examples of the seed's rules ---------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "storage", "normalized"),
    [
        ("Hello World", "Hello World", "hello world"),
        ("  Hello   World  ", "Hello World", "hello world"),
        ("Tabs\tand\nnew\r\nlines \t here", "Tabs and new lines here", "tabs and new lines here"),
        ("The user prefers tabs.", "The user prefers tabs.", "the user prefers tabs"),
        ("Really?!...", "Really?!...", "really"),
        ("Wait;: ", "Wait;:", "wait"),
        ("Hello, world.", "Hello, world.", "hello, world"),  # only trailing punctuation
        ("a.b.c.", "a.b.c.", "a.b.c"),
        ("end .", "end .", "end "),  # the space before it stays
        ('quoted."', 'quoted."', 'quoted."'),  # '"' is not in the class
        ("ÉCOLE Ärger", "ÉCOLE Ärger", "école ärger"),
        ("nbsp\u00a0and\u3000ideographic\u2003em", "nbsp and ideographic em", "nbsp and ideographic em"),
        ("\ufeffbom\ufeff start", "bom start", "bom start"),
        ("line\u2028sep\u2029para", "line sep para", "line sep para"),
        ("vt\x0bff\x0c", "vt ff", "vt ff"),
        # JS \s does not include U+0085 (NEL) or the U+001C..U+001F separators:
        ("a\x85b\x1cc", "a\x85b\x1cc", "a\x85b\x1cc"),
        ("...", "...", ""),
        ("  !?  ", "!?", ""),
        ("", "", ""),
        ("   \n\t ", "", ""),
    ],
)
def test_seed_rules_on_examples(content: str, storage: str, normalized: str) -> None:
    n = normalize_and_hash(content)
    assert n.storage_content == storage
    assert n.normalized_content == normalized
    basis = normalized if normalized else storage.lower()
    assert n.content_hash == sha(basis)
    assert content_hash(content) == n.content_hash


def test_known_digest() -> None:
    # sha256("hello world"), a well-known value.
    assert normalize_and_hash("  Hello   World!! ").content_hash == (
        "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
    )


def test_empty_normalized_falls_back_to_lowercased_storage() -> None:
    assert normalize_and_hash("!!!").content_hash == sha("!!!")
    assert normalize_and_hash("?").content_hash != normalize_and_hash("!").content_hash
    assert normalize_and_hash("").content_hash == sha("")


def test_result_is_frozen() -> None:
    n = normalize_and_hash("x")
    with pytest.raises(AttributeError):
        n.storage_content = "y"  # type: ignore[misc]


# -- properties ------------------------------------------------------------------------------------


@settings(max_examples=400)
@given(any_text)
@example("\ud800 lone surrogate \udfff")
@example("\x00nul\x00")
def test_matches_seed_oracle(content: str) -> None:
    assert normalize_and_hash(content) == oracle(content)


@settings(max_examples=300)
@given(any_text)
def test_hash_is_64_lowercase_hex(content: str) -> None:
    assert HEX64.fullmatch(normalize_and_hash(content).content_hash)


@settings(max_examples=300)
@given(any_text)
def test_idempotent_on_storage_content(content: str) -> None:
    first = normalize_and_hash(content)
    again = normalize_and_hash(first.storage_content)
    assert again == first
    assert normalize_and_hash(again.storage_content) == first


@settings(max_examples=300)
@given(any_text)
def test_storage_shape(content: str) -> None:
    n = normalize_and_hash(content)
    s = n.storage_content
    assert s == s.strip(" ")
    assert "  " not in s
    assert not any(ch in s for ch in JS_WHITESPACE.replace(" ", ""))
    assert not n.normalized_content.endswith(tuple(PUNCT))
    assert n.normalized_content == n.storage_content.lower().rstrip(PUNCT)


@settings(max_examples=300)
@given(st.lists(word, min_size=1, max_size=8), st.data())
def test_hash_invariant_under_whitespace(words: list[str], data: st.DataObject) -> None:
    canonical = " ".join(words)
    seps = [data.draw(ws_run) for _ in range(len(words) - 1)]
    lead = data.draw(st.one_of(st.just(""), ws_run))
    trail = data.draw(st.one_of(st.just(""), ws_run))
    messy = lead + "".join(w + s for w, s in zip(words, seps + [""])) + trail
    a, b = normalize_and_hash(canonical), normalize_and_hash(messy)
    assert b.storage_content == canonical
    assert a == b


@settings(max_examples=300)
@given(any_text)
def test_hash_invariant_under_lowercasing(content: str) -> None:
    assert content_hash(content.lower()) == content_hash(content)


@settings(max_examples=300)
@given(st.text(st.characters(codec="ascii"), min_size=1), st.data())
def test_hash_invariant_under_ascii_case_changes(content: str, data: st.DataObject) -> None:
    flips = data.draw(st.lists(st.booleans(), min_size=len(content), max_size=len(content)))
    mixed = "".join(c.swapcase() if f else c for c, f in zip(content, flips))
    assert content_hash(mixed) == content_hash(content)
    assert content_hash(content.upper()) == content_hash(content)


@settings(max_examples=300)
@given(any_text, st.text(st.sampled_from(list(PUNCT)), min_size=1, max_size=6))
def test_hash_invariant_under_trailing_punctuation(content: str, punct: str) -> None:
    n = normalize_and_hash(content)
    if not n.normalized_content:
        # all punctuation (or empty): the hash basis is the lowercased storage content itself
        assert n.content_hash == sha(n.storage_content.lower())
        return
    assert content_hash(n.storage_content + punct) == n.content_hash
    assert content_hash(content.rstrip(JS_WHITESPACE) + punct) == n.content_hash


@settings(max_examples=200)
@given(st.lists(word, min_size=1, max_size=4), st.lists(word, min_size=1, max_size=4))
def test_different_words_different_hashes(a: list[str], b: list[str]) -> None:
    na, nb = normalize_and_hash(" ".join(a)), normalize_and_hash(" ".join(b))
    if na.normalized_content != nb.normalized_content and na.normalized_content and nb.normalized_content:
        assert na.content_hash != nb.content_hash
