"""The one secret-redaction function of memlane (memory-pipeline-v2.md "Session Checkpoints":
"Secrets are redacted before storage using pattern-based scrubbing (Bearer tokens, API keys,
base64 credential blobs, env variable values)").

Applied before storing transcripts, session context and checkpoints, and to memories as the
``redact.memories`` setting says (docs/security.md lists what is stored and what is redacted).
This module is a leaf (standard library only).

``redact(text)`` replaces the secret part of each match with ``[REDACTED]`` and keeps its label,
so ``Authorization: Bearer abc.def`` becomes ``Authorization: Bearer [REDACTED]`` and
``api_key = "sk-..."`` becomes ``api_key = "[REDACTED]"``. Vendor keys keep their public prefix
(``sk-ant-[REDACTED]``, ``ghp_[REDACTED]``, ``AKIA[REDACTED]``). It is idempotent (passes run to a
fixpoint and no pattern matches a bare ``[REDACTED]``), never raises, and stays near linear in
the input size (no repeat nested in an unbounded repeat, bounded label scans, a value is only
scanned after its label is accepted; tests/test_redact.py counts the characters every regex call
passes over). Every regex is a compiled module constant. ``session_key`` is deliberately not a secret label.

Rules, in order:

1. PEM private key blocks (``-----BEGIN ... PRIVATE KEY-----`` .. ``-----END ...-----``); a block
   with no END line is redacted to the end of the text.
2. JWTs (``eyJ<b64url>.<b64url>.<b64url>``), whole.
3. URL credentials: ``scheme://user:PASSWORD@host``; the password runs to the last ``@`` before
   the next ``/`` or space (``postgres://u:p@ss@db/x`` -> ``postgres://u:[REDACTED]@db/x``).
4. ``Authorization:`` / ``Authorization=`` values: always after a scheme (Bearer, Basic, Token,
   Digest, Negotiate); without a scheme only when the value is token-like (see ``_tokenish``).
5. A bare ``bearer <token>`` (any case; the token is the next non-space run) when it is token-like
   (>= 20 chars, or >= 8 with a digit, a symbol or an inner capital); a bare ``Basic <b64>`` when
   the base64 decodes to printable ``user:password`` text or is >= 40 characters.
6. Vendor keys: Anthropic ``sk-ant-``, OpenAI ``sk-``/``sk-proj-`` (body must contain a digit or
   both cases, so ``sk-learn-compatible-models`` survives), GitHub ``ghp_ gho_ ghu_ ghs_ ghr_
   github_pat_``, GitLab ``glpat- gldt- glrt- glptt- glsoat-``, AWS ``AKIA``/``ASIA`` + 16, Slack
   ``xox[baprs]-`` and ``xapp-``, Google ``AIza`` (API keys), ``ya29.`` (OAuth access tokens) and
   ``GOCSPX-`` (OAuth client secrets), Stripe ``sk_live_ sk_test_ rk_live_ rk_test_ pk_live_
   pk_test_ whsec_``, PyPI ``pypi-AgE...`` upload tokens; npm ``npm_`` and Hugging Face ``hf_``
   (body: >= 30 letters and digits with a digit or both cases, so ``hf_`` identifiers survive).
   Azure connection strings: the value of ``AccountKey=`` / ``SharedAccessKey=`` up to its ``;``.
   MySQL clients: ``mysql ... -pPASSWORD`` (the password glued to ``-p``; ``-p`` alone prompts,
   ``-P`` is the port) for ``mysql mysqldump mysqladmin mysqlimport mysqlshow mysqlcheck
   mariadb mariadb-dump``.
7. Labelled values ``NAME = value`` / ``NAME: value`` / ``"NAME": "value"`` (JSON, YAML, ini,
   code, ``export NAME=...``, ``.env`` lines, ``--NAME=value`` command-line options such as
   ``--password=...``; ``PGPASSWORD=...`` is an env-style name). NAME is split into segments (``_ - .`` and
   camelCase); it is a secret label when a segment is one of ``_SECRET_WORDS`` (``password``,
   ``token``, ``secret``, ``auth``, ``credentials`` ...) or a pair is ``api key``, ``private key``,
   ``access key`` ... An ALL-CAPS name (env style) or one after ``export`` is a label when it
   *contains* KEY, SECRET, TOKEN, PASSWORD, PASSWD, CREDENTIAL or PRIVATE. Names whose last
   segment describes metadata (``max_tokens``, ``token_count``, ``secret_name``, ``password_file``,
   ``TOKEN_URL`` ...) are not labels. The value is a quoted string (to its closing quote or the
   end of the line) or an unquoted run of non-space, non-quote characters; it is redacted
   whatever it looks like (a label says it is secret).
8. Standalone base64 credential blobs. A run of ``[A-Za-z0-9+/]`` of >= 40 characters (plus ``=``
   padding) bounded by non-base64 characters is redacted only when it contains an upper-case
   letter, a lower-case letter and a digit, is not pure hex (git SHAs, sha256 digests stay), and
   its lower-case runs average under 3 letters. Random base64 averages ~1.7; words, CamelCase
   identifiers (``AbstractSingletonProxyFactoryBean2``) and paths average 3 or more, so ordinary
   long words, identifiers and paths survive. About 0.5 % of random 40-character blobs miss
   this heuristic; blobs under a label (rules 4, 5, 7) are always redacted.

Not covered: secrets with no label and no recognisable shape (``my password is hunter2``).
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any, overload

REDACTED_MARK = "[REDACTED]"
_MAX_PASSES = 6

# Each pattern starts with a literal and checks the word boundary before it with a lookbehind
# placed after it: the regex engine then scans for the literal, several times faster than a
# leading "\b" or lookbehind, which is tried at every position.
_PEM = re.compile(
    r"(-----BEGIN ((?:[A-Z0-9]{1,20} ){0,4}PRIVATE KEY(?: BLOCK)?)-----)[\s\S]*?(?:(-----END [A-Z0-9 ]{0,80}-----)|\Z)"
)
_JWT = re.compile(r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
# URL credentials after "://"; the password is greedy up to the last "@" before a "/" or a space
# (bounded: O(256) per URL).
_URL_CRED = re.compile(r"(://[^\s:/@]{0,256}:)([^\s/]{1,256})(?=@)")
_AUTH_HEADER = re.compile(
    r"(?i)(authorization(?<=\bauthorization)[\"']?[ \t]*[:=][ \t]*[\"']?[ \t]*)"
    r"((?:bearer|basic|token|digest|negotiate)[ \t]+)?([^\s\"'`]+)"
)
_BEARER = re.compile(r"(?i)(bearer(?<=\bbearer)[ \t]+)([^\s\"'`]+)")
_BASIC = re.compile(r"(Basic(?<=\bBasic)[ \t]+)([A-Za-z0-9+/]+={0,2})(?![A-Za-z0-9+/=])")
#: Vendor keys: group 1 (the public prefix) is kept.
_VENDOR = [
    re.compile(p)
    for p in (
        r"(sk-ant-(?<=\bsk-ant-))[A-Za-z0-9_\-]{8,}",
        r"(github_pat_(?<=\bgithub_pat_))[A-Za-z0-9_]{20,}",
        r"(gh(?<=\bgh)[pousr]_)[A-Za-z0-9]{20,}",
        r"(A(?<=\bA)(?:KIA|SIA))[A-Z0-9]{16}\b",
        r"(xox(?<=\bxox)[baprs]-)[A-Za-z0-9-]{10,}",
        r"(xapp-(?<=\bxapp-))[A-Za-z0-9-]{10,}",
        r"(AIza(?<=\bAIza))[0-9A-Za-z_\-]{30,}",
        r"(ya29\.(?<=\bya29\.))[0-9A-Za-z_\-]{20,}",
        r"(GOCSPX-(?<=\bGOCSPX-))[0-9A-Za-z_\-]{20,}",
        r"(gl(?<=\bgl)(?:pat|dt|rt|ptt|soat)-)[0-9A-Za-z_\-]{20,}",
        r"([srp]k_(?<=\b[srp]k_)(?:live|test)_)[0-9A-Za-z]{10,}",
        r"(whsec_(?<=\bwhsec_))[0-9A-Za-z]{20,}",
        r"(pypi-(?<=\bpypi-))AgE[0-9A-Za-z_\-]{50,}",
    )
]
#: Lower-case literals one of which a text must hold for the matching ``_VENDOR`` rule to run.
_VENDOR_NEEDLES = (
    ("sk-ant-",),
    ("github_pat_",),
    ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
    ("akia", "asia"),
    ("xox",),
    ("xapp-",),
    ("aiza",),
    ("ya29.",),
    ("gocspx-",),
    ("glpat-", "gldt-", "glrt-", "glptt-", "glsoat-"),
    ("k_live_", "k_test_"),
    ("whsec_",),
    ("pypi-age",),
)
#: npm and Hugging Face tokens: prefix kept, body must look random (``_random_body``).
_RANDOM_VENDOR = re.compile(r"((?:npm|hf)_(?:(?<=\bnpm_)|(?<=\bhf_)))([0-9A-Za-z]{30,})(?![0-9A-Za-z_])")
#: Azure connection-string keys: the value runs to the next ``;`` (the string goes on after it).
_AZURE_KEY = re.compile(
    r"(?i)((?:AccountKey|SharedAccessKey)(?:(?<=\bAccountKey)|(?<=\bSharedAccessKey))[ \t]*=[ \t]*)([^;\s\"'`]+)"
)
#: A MySQL/MariaDB client's ``-pPASSWORD`` (case-sensitive ``-p``: ``-P`` is the port).
_MYSQL_P = re.compile(
    r"(?i:(?:mysql|mariadb)(?:(?<=\bmysql)|(?<=\bmariadb))(?:dump|admin|import|show|check|-dump)?)(?![\w-])"
    r"[^\n;|&]{0,300}?[ \t](-p)(\"[^\"\n]*\"?|'[^'\n]*'?|[^\s\"'`]+)"
)
_OPENAI = re.compile(r"(sk-(?<=\bsk-))((?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,})")
_KV_LABEL = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?:(?P<export>export[ \t]{1,16})|--)?(?P<q>[\"']?)(?P<name>[A-Za-z_][A-Za-z0-9_.\-]{0,80})"
    r"(?P=q)[ \t]{0,64}(?::=|=>|[:=])[ \t]*"
)
#: The secret words of ``_SECRETISH`` in lower case, searched in the lower-cased text: rule 7
#: looks for labels only around them.
_SECRETISH_LOW = re.compile(r"pass|pwd|secret|token|auth|cred|key|priv")
#: How far a label's start can be before a secret word in its name ("export", 16 blanks, a
#: quote, 80 name characters) and its separator after it (81 name characters, a quote, 64
#: blanks, ":=").
_LABEL_BEFORE = 6 + 16 + 1 + 80
_LABEL_AFTER = 81 + 1 + 64 + 2
_KV_VALUE = re.compile(
    r"(?:(?:[Bb]earer|[Bb]asic|[Tt]oken)[ \t]+)?"
    r"(?P<value>\"(?:\\.|[^\"\\\n])*\"?|'(?:\\.|[^'\\\n])*'?|[^\s\"'`]+)"
)
_QUOTED = re.compile(r"([\"'])((?:\\.|(?!\1)[^\\\n])*)(\1?)")
_B64_RUN = re.compile(r"(?<![A-Za-z0-9+/=_-])[A-Za-z0-9+/]{40,}={0,2}(?![A-Za-z0-9+/=_-])")

_SECRET_WORDS = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "secrets",
        "token",
        "apikey",
        "credential",
        "credentials",
        "creds",
        "auth",
        "privatekey",
        "accesskey",
        "secretkey",
    }
)
#: Secret words only inside a longer name (``db_pass``), not alone (``pass: 2``).
_SECRET_WORDS_COMPOUND = frozenset({"pass"})
_SECRET_PAIRS = frozenset(
    {
        ("api", "key"),
        ("private", "key"),
        ("access", "key"),
        ("secret", "key"),
        ("signing", "key"),
        ("encryption", "key"),
        ("master", "key"),
        ("auth", "key"),
        ("client", "secret"),
    }
)
_ENV_WORDS = ("KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL", "PRIVATE")
_META_SUFFIXES = frozenset(
    {
        "count",
        "counts",
        "limit",
        "limits",
        "len",
        "length",
        "size",
        "type",
        "types",
        "kind",
        "url",
        "uri",
        "endpoint",
        "file",
        "path",
        "dir",
        "name",
        "names",
        "env",
        "expiry",
        "expires",
        "expiration",
        "ttl",
        "budget",
        "usage",
        "estimate",
        "max",
        "min",
        "header",
        "field",
        "policy",
        "rotation",
        "hint",
        "prefix",
        "format",
        "required",
        "enabled",
    }
)
#: A name can be a secret label (``_is_secret_name``) only if it holds one of these.
_SECRETISH = re.compile(r"(?i)pass|pwd|secret|token|auth|cred|key|priv")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
_NAME_SEPARATORS = re.compile(r"[_.\-]+")
_HEX = re.compile(r"[0-9a-fA-F]+")
_LOWER_RUN = re.compile(r"[a-z]+")


def redact(text: str) -> str:
    """``text`` with every recognised secret replaced by ``[REDACTED]`` (labels kept).

    Idempotent: ``redact(redact(x)) == redact(x)``. Never raises on a ``str``; anything else is
    converted with ``str()`` first.
    """
    if not isinstance(text, str):
        text = str(text)
    for _ in range(_MAX_PASSES):
        out = _one_pass(text)
        if out == text:
            return out
        text = out
    return text


#: ``redact.memories`` values: which memories are redacted before they are stored.
MEMORY_MODES = ("hooks", "all", "off")
#: ``source_type`` values that mark a memory as text from an agent session's hooks (a hook
#: script, a session summary, a transcript): redacted in the default ``hooks`` mode.
HOOK_SOURCE_TYPES = frozenset({"hook", "hooks", "session", "transcript"})


def redacts_memory(mode: str, source_type: str | None) -> bool:
    """Whether a memory with ``source_type`` is redacted under ``redact.memories = mode``.

    ``all``: every memory (API, CLI, MCP, import, documents); ``hooks``: only those whose
    ``source_type`` is one of :data:`HOOK_SOURCE_TYPES` (case-insensitive); ``off``: none.
    An unknown mode redacts everything (the safe reading).
    """
    if mode == "off":
        return False
    if mode == "hooks":
        return isinstance(source_type, str) and source_type.strip().lower() in HOOK_SOURCE_TYPES
    return True


@overload
def redact_json(value: dict[str, Any]) -> dict[str, Any]: ...
@overload
def redact_json(value: object) -> object: ...


def redact_json(value: object) -> object:
    """``value`` (JSON-like data) with :func:`redact` applied to every string in it, keys kept
    (a dict gives a dict).

    Lists, tuples and dicts are rebuilt; numbers, booleans and None pass unchanged.
    """
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact_json(v) for v in value)
    return value


def _one_pass(text: str) -> str:
    if not text:
        return text
    # A rule runs only when the text holds one of its literals (in any case). A redaction only
    # puts "[REDACTED]" between kept characters, so no rule creates another rule's literal: the
    # lower-cased text of the pass's start answers for the whole pass.
    low = text.lower()
    if "-----begin" in low:
        text = _PEM.sub(_pem_sub, text)
    if "eyj" in low:
        text = _JWT.sub(REDACTED_MARK, text)
    if "://" in low:
        text = _scan(_URL_CRED, text, lambda m: _keep(m, 2))
    if "authorization" in low:
        text = _scan(_AUTH_HEADER, text, _auth_sub)
    if "bearer" in low:
        text = _scan(_BEARER, text, lambda m: _keep(m, 2) if _tokenish(m.group(2)) else None)
    if "basic" in low:
        text = _scan(_BASIC, text, _basic_sub)
    for pattern, needles in zip(_VENDOR, _VENDOR_NEEDLES):
        if any(n in low for n in needles):
            text = pattern.sub(lambda m: m.group(1) + REDACTED_MARK, text)
    if "npm_" in low or "hf_" in low:
        text = _scan(
            _RANDOM_VENDOR,
            text,
            lambda m: m.group(1) + REDACTED_MARK if _random_body(m.group(2)) else None,
            resume_after_reject=True,
        )
    if "accountkey" in low or "sharedaccesskey" in low:
        text = _scan(_AZURE_KEY, text, lambda m: _keep(m, 2))
    if "mysql" in low or "mariadb" in low:
        text = _scan(_MYSQL_P, text, _mysql_sub)
    if "sk-" in low:
        # a rejected body holds no random sub-body either: resume after it (linear on sk-aaa-sk-aaa...)
        text = _scan(
            _OPENAI,
            text,
            lambda m: m.group(1) + REDACTED_MARK if _random_body(m.group(2)) else None,
            resume_after_reject=True,
        )
    text = _kv_redact(text)
    return _scan(_B64_RUN, text, lambda m: REDACTED_MARK if _credential_blob(m.group(0)) else None)


def _scan(pattern: re.Pattern[str], text: str, fn, *, resume_after_reject: bool = False) -> str:
    """Like ``pattern.sub(fn, text)``, but a match ``fn`` declines (None) consumes nothing: the
    search resumes one character after its start, so ``BEARER bearer <token>`` or
    ``note: password=x`` still reach the inner match."""
    out: list[str] = []
    last = pos = 0
    while (m := pattern.search(text, pos)) is not None:
        replacement = fn(m)
        if replacement is None:
            pos = m.end() if resume_after_reject else m.start() + 1
            continue
        out.append(text[last : m.start()])
        out.append(replacement)
        last = pos = m.end()
    out.append(text[last:])
    return "".join(out)


def _keep(m: re.Match[str], secret: int) -> str | None:
    """The match with group ``secret`` replaced (None when it already is the redaction mark)."""
    if m.group(secret) == REDACTED_MARK:
        return None
    return m.group(0)[: m.start(secret) - m.start(0)] + REDACTED_MARK + m.group(0)[m.end(secret) - m.start(0) :]


def _pem_sub(m: re.Match[str]) -> str:
    end = m.group(3)
    if end is None:
        return f"{m.group(1)}\n{REDACTED_MARK}"
    return f"{m.group(1)}\n{REDACTED_MARK}\n{end}"


def _mysql_sub(m: re.Match[str]) -> str | None:
    """``-p`` + the password, keeping its quotes (None when already redacted)."""
    replacement = _value_replacement(m.group(2))
    if replacement is None:
        return None
    return m.group(0)[: m.start(2) - m.start(0)] + replacement


def _auth_sub(m: re.Match[str]) -> str | None:
    if m.group(2) is None and not _tokenish(m.group(3)):
        return None
    return _keep(m, 3)


def _basic_sub(m: re.Match[str]) -> str | None:
    blob = m.group(2)
    if len(blob.rstrip("=")) >= 40:
        return _keep(m, 2)
    try:
        raw = base64.b64decode(blob, validate=True).decode("ascii")
    except (binascii.Error, ValueError):
        return None
    return _keep(m, 2) if ":" in raw and raw.isprintable() else None


def _kv_redact(text: str) -> str:
    """Rule 7. A secret label's name holds a secret word (``_SECRETISH``), so labels are looked
    for only in a bounded window around each secret word, in text order; the value is matched
    only after a secret label. Linear: each secret word costs its window, and after a redaction
    the scan resumes past the value."""
    low = text.lower()
    # str.lower() keeps positions unless a character lower-cases to several (rare non-ASCII)
    hits = _SECRETISH_LOW.finditer(low) if len(low) == len(text) else _SECRETISH.finditer(text)
    out: list[str] = []
    last = pos = 0
    for hit in hits:
        i = hit.start()
        if i < pos:
            continue
        p = max(pos, i - _LABEL_BEFORE)
        while (found := _KV_LABEL.search(text, p, i + _LABEL_AFTER)) is not None and found.start() <= i:
            p = found.start() + 1
            m = _KV_LABEL.match(text, found.start())  # the whole label (its blanks may run past the window)
            if (
                m is None
                or not m.start("name") <= i < m.end("name")
                or not _is_secret_name(m.group("name"), exported=m.group("export") is not None)
            ):
                continue
            v = _KV_VALUE.match(text, m.end())
            if v is None:
                continue
            replacement = _value_replacement(v.group("value"))
            if replacement is not None:
                out.append(text[last : v.start("value")])
                out.append(replacement)
                last = v.end()
            pos = v.end()
            break
    out.append(text[last:])
    return "".join(out)


def _value_replacement(value: str) -> str | None:
    """``[REDACTED]`` keeping the quotes; None when there is nothing left to redact."""
    q = _QUOTED.fullmatch(value)
    if q is None:
        return None if value == REDACTED_MARK else REDACTED_MARK
    if q.group(2) in ("", REDACTED_MARK):
        return None
    return f"{q.group(1)}{REDACTED_MARK}{q.group(3)}"


def _segments(name: str) -> list[str]:
    out: list[str] = []
    for part in _NAME_SEPARATORS.split(name):
        out.extend(s.lower() for s in _CAMEL.findall(part))
    return out


def _is_secret_name(name: str, *, exported: bool = False) -> bool:
    """Whether ``name`` labels a secret value (rule 7 of the module docstring)."""
    if _SECRETISH.search(name) is None:
        return False
    segs = _segments(name)
    if not segs or segs[-1] in _META_SUFFIXES:
        return False
    if (exported or (name.upper() == name and any(c.isalpha() for c in name))) and any(
        w in name.upper() for w in _ENV_WORDS
    ):
        return True
    if any(s in _SECRET_WORDS for s in segs):
        return True
    if len(segs) > 1 and any(s in _SECRET_WORDS_COMPOUND for s in segs):
        return True
    return any((a, b) in _SECRET_PAIRS for a, b in zip(segs, segs[1:]))


def _tokenish(value: str) -> bool:
    """Token-like: >= 20 characters, or >= 8 with a digit, a symbol or an inner capital."""
    if value == REDACTED_MARK or len(value) < 8:
        return False
    if len(value) >= 20:
        return True
    return any(c.isdigit() or c in "-._~+/=" for c in value) or any(c.isupper() for c in value[1:])


def _random_body(body: str) -> bool:
    """Key-like body: contains a digit, or both upper- and lower-case letters."""
    return any(c.isdigit() for c in body) or (any(c.isupper() for c in body) and any(c.islower() for c in body))


def _credential_blob(run: str) -> bool:
    """Rule 8: an unlabelled base64 run that looks random (see the module docstring)."""
    core = run.rstrip("=")
    if len(core) < 40:
        return False
    if not (any(c.isupper() for c in core) and any(c.islower() for c in core) and any(c.isdigit() for c in core)):
        return False
    if _HEX.fullmatch(core):
        return False
    lower_runs = _LOWER_RUN.findall(core)
    return sum(map(len, lower_runs)) / len(lower_runs) < 3.0
