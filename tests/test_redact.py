"""Secret scrubbing before storage (memlane.sessions.redact): each rule, the texts it must leave
alone, and Hypothesis properties (idempotent, never raises, a planted secret never survives)."""

from __future__ import annotations

import base64
import os
import string
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from memlane.sessions.redact import REDACTED_MARK, redact

R = REDACTED_MARK

# -- each rule: exact output ------------------------------------------------------------------

EXACT = [
    # Bearer / Authorization
    ("Authorization: Bearer abc.def-123", f"Authorization: Bearer {R}"),
    ("authorization: bearer xyz_TOKEN_987", f"authorization: bearer {R}"),
    ('curl -H "Authorization: Bearer eyJhbGciOi.abc" https://x', f'curl -H "Authorization: Bearer {R}" https://x'),
    ('{"Authorization": "Bearer s3cr3t-token"}', f'{{"Authorization": "Bearer {R}"}}'),
    ("Authorization: Basic dXNlcjpwYXNz", f"Authorization: Basic {R}"),
    ("Authorization: Token 0123456789abcdef", f"Authorization: Token {R}"),
    ("Authorization: abcdef0123456789", f"Authorization: {R}"),
    ("then send bearer abcdef1234567 to the api", f"then send bearer {R} to the api"),
    ("Bearer AbCdEfGhIjKlMnOpQrStUv", f"Bearer {R}"),
    # vendor keys keep their public prefix
    ("key sk-ant-api03-abcdefgh_ijkl-mn0123", f"key sk-ant-{R}"),
    ("OPENAI_KEY is sk-proj-Abcdefghij1234567890XYZ", f"OPENAI_KEY is sk-{R}"),
    ("use sk-" + "a1B2" * 12 + " here", f"use sk-{R} here"),
    ("token ghp_" + "a1" * 18, f"token ghp_{R}"),
    ("gho_" + "Z9" * 18 + ".", f"gho_{R}."),
    ("ghs_" + "x" * 36, f"ghs_{R}"),
    ("github_pat_11ABCDEFG0_" + "q" * 40, f"github_pat_{R}"),
    ("id AKIAIOSFODNN7EXAMPLE ok", f"id AKIA{R} ok"),
    ("ASIAY34FZKBOKMUTVV7A", f"ASIA{R}"),
    ("slack xoxb-123456789012-abcdefABCDEF", f"slack xoxb-{R}"),
    ("xoxp-1-2-3-abcdef0123", f"xoxp-{R}"),
    ("maps AIzaSyA-1234567890abcdefghijklmnopqrstu", f"maps AIza{R}"),
    # labelled values
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", f"aws_secret_access_key = {R}"),
    ("api_key=abc123", f"api_key={R}"),
    ("apikey: hello", f"apikey: {R}"),
    ("client_secret='abc def'", f"client_secret='{R}'"),
    ("password = hunter2", f"password = {R}"),
    ('{"password": "hunter2", "user": "bob"}', f'{{"password": "{R}", "user": "bob"}}'),
    ("{'token': 'abc', 'n': 1}", f"{{'token': '{R}', 'n': 1}}"),
    ('"accessToken":"eyJx"', f'"accessToken":"{R}"'),
    ("note: password=abc def", f"note: password={R} def"),
    ("db_pass: x9", f"db_pass: {R}"),
    ('password="unterminated', f'password="{R}'),
    ('"password": "with \\" escaped quote"', f'"password": "{R}"'),
    ("x-api-key: 1234", f"x-api-key: {R}"),
    ("token: Bearer abc", f"token: Bearer {R}"),
    ('"auth": "dXNlcm5hbWU6cGFzc3dvcmQ="', f'"auth": "{R}"'),
    # env variables
    ("export FOO_KEY=bar", f"export FOO_KEY={R}"),
    ("export foo_key=bar", f"export foo_key={R}"),
    ("FOO_SECRET=baz ./run.sh", f"FOO_SECRET={R} ./run.sh"),
    ("GITHUB_TOKEN=abc\nDEBUG=1\nDB_PASSWORD='p w'\nMY_PASSWD=x\nGCP_CREDENTIALS=/x\nSSH_PRIVATE=k",
     f"GITHUB_TOKEN={R}\nDEBUG=1\nDB_PASSWORD='{R}'\nMY_PASSWD={R}\nGCP_CREDENTIALS={R}\nSSH_PRIVATE={R}"),
    ("STRIPEKEY=sk_live_abc", f"STRIPEKEY={R}"),
    ("$env:OPENAI_API_KEY = \"abc\"", f"$env:OPENAI_API_KEY = \"{R}\""),
    # URL credentials
    ("postgres://user:s3cret@host/db", f"postgres://user:{R}@host/db"),
    # base64 credential blobs
    ("Basic dXNlcjpwYXNz", f"Basic {R}"),
    ("JWT eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
     f"JWT {R}"),
    # PEM
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nxyz==\n-----END RSA PRIVATE KEY-----\nafter",
     f"-----BEGIN RSA PRIVATE KEY-----\n{R}\n-----END RSA PRIVATE KEY-----\nafter"),
    ("a\n-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----",
     f"a\n-----BEGIN PRIVATE KEY-----\n{R}\n-----END PRIVATE KEY-----"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n(cut here",
     f"-----BEGIN OPENSSH PRIVATE KEY-----\n{R}"),
    ("-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF\n-----END PGP PRIVATE KEY BLOCK-----",
     f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n{R}\n-----END PGP PRIVATE KEY BLOCK-----"),
]


@pytest.mark.parametrize("text,expected", EXACT)
def test_redacts_exactly(text, expected):
    assert redact(text) == expected
    assert redact(expected) == expected


def test_standalone_random_base64_blob_is_redacted():
    blob = base64.b64encode(bytes(range(7, 40))).decode()
    assert redact(f"creds were {blob} yesterday") == f"creds were {R} yesterday"
    aws_example = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert redact(f"secret is {aws_example}") == f"secret is {R}"


def test_most_random_base64_blobs_are_caught_without_a_label():
    blobs = [base64.b64encode(os.urandom(45)).decode() for _ in range(300)]
    caught = sum(redact(f"x {b} y") == f"x {R} y" for b in blobs)
    assert caught >= 285  # the heuristic misses ~0.5 %; labelled blobs are always redacted


# -- left alone ---------------------------------------------------------------------------

UNCHANGED = [
    "",
    "plain prose about tokens, secrets and passwords in general",
    "the bearer of bad news",
    "Basic usage of the API",
    "Bearer Token",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b fixed it",
    "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "Pneumonoultramicroscopicsilicovolcanoconiosis is a long word",
    "class AbstractSingletonProxyFactoryBeanConfigurationManager2024:",
    "HTTPServerRequestHandlerFactoryImplementationV2",
    "open Users/Alice/Projects/memlane2/src/memlane/api/app.py",
    "src/memlane/sessions/checkpoints/formatting/markdown2024",
    "uuid 123e4567-e89b-12d3-a456-426614174000",
    "see https://example.com/docs/api?page=2",
    "max_tokens = 1000",
    "token_count: 5",
    "prompt_tokens=42, completion_tokens=7",
    "secret_name: prod-db",
    "password_file=/etc/pass",
    "TOKEN_URL=https://auth.example.com/token",
    "key = 'user_id'",
    "My first pass: fix tests",
    "pip install scikit-learn; sk-learn-compatible-estimators-here",
    "Authorization: required",
    "author: Alice",
    "passport: yes",
    "session_key: claude-abc123",
    "DEBUG=1\nPORT=8080",
    "[REDACTED]",
    "password: [REDACTED]",
]


@pytest.mark.parametrize("text", UNCHANGED)
def test_leaves_ordinary_text_alone(text):
    assert redact(text) == text


def test_non_string_input_is_stringified():
    assert redact(12345) == "12345"  # type: ignore[arg-type]


@pytest.mark.parametrize("text", [
    "a=" * 100_000, "password=" * 20_000, ("sk-" + "a" * 30) * 5_000, "bearer x " * 30_000,
    ("A" * 39 + " ") * 5_000, "-----BEGIN PRIVATE KEY-----x" * 3_000, "Authorization: x " * 20_000,
    "https://a:" * 30_000, "a:" * 100_000, "'\"" * 100_000, "Ab1" * 70_000, 'password="' + "\\" * 100_000,
], ids=lambda t: repr(t[:12]))
def test_pathological_inputs_stay_near_linear(text):
    t0 = time.perf_counter()
    out = redact(text)
    assert time.perf_counter() - t0 < 10  # ~0.1-0.8 s here; quadratic would be minutes
    assert redact(out) == out


# -- properties ------------------------------------------------------------------------------

FRAGMENTS = st.sampled_from([
    " ", "\n", "\t", "=", ":", '"', "'", "`", "/", "-", "_", ".", ",", "@", "[", "]", "{", "}",
    "password", "token", "secret", "API_KEY", "export ", "Authorization", "Bearer ", "bearer ", "Basic ",
    "sk-", "sk-ant-", "ghp_", "AKIA", "xoxb-", "AIza", "eyJ", "://", "user:", "auth", "[REDACTED]",
    "-----BEGIN PRIVATE KEY-----", "-----END PRIVATE KEY-----", "dXNlcjpwYXNz", "A1b2C3d4E5f6G7h8I9j0" * 2,
    "abcdefghij0123456789", "ZZZZZZZZZZZZZZZZ", "==", "\\",
])
STRUCTURED = st.lists(st.one_of(FRAGMENTS, st.text(max_size=8)), max_size=30).map("".join)


@settings(max_examples=600, deadline=None)
@given(st.one_of(st.text(), STRUCTURED))
def test_idempotent_and_never_raises(text):
    once = redact(text)
    assert isinstance(once, str)
    assert redact(once) == once


ALNUM = string.ascii_letters + string.digits
VALUE_CHARS = ALNUM + "!#%&()*+,-./:;<=>?@^_{|}~"


def _with_digit(chars: str, min_size: int, max_size: int) -> st.SearchStrategy[str]:
    return st.tuples(st.text(chars, min_size=min_size - 1, max_size=max_size - 1),
                     st.sampled_from(string.digits), st.integers(0, max_size)).map(
        lambda t: t[0][: t[2]] + t[1] + t[0][t[2]:])


@st.composite
def planted(draw) -> tuple[str, str]:
    """(text containing a secret, the secret part that must not survive)."""
    kind = draw(st.sampled_from(["bearer", "auth", "anthropic", "openai", "github", "aws", "slack", "google",
                                 "kv", "json", "env", "pem", "basic", "url", "jwt"]))
    body = draw(_with_digit(ALNUM, 20, 48))
    if kind == "bearer":
        return f"bearer {body}", body
    if kind == "auth":
        scheme = draw(st.sampled_from(["Bearer", "Token", "Basic"]))
        return f"Authorization: {scheme} {body}", body
    if kind == "anthropic":
        return f"sk-ant-api03-{body}", body
    if kind == "openai":
        return f"sk-{body}", body
    if kind == "github":
        return draw(st.sampled_from(["ghp_", "gho_", "ghs_", "github_pat_"])) + body, body
    if kind == "aws":
        key = draw(st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16))
        return f"AKIA{key}", key
    if kind == "slack":
        return f"xoxb-{body}", body
    if kind == "google":
        return f"AIza{body}{body}", body
    value = draw(_with_digit(VALUE_CHARS, 6, 30))
    name = draw(st.sampled_from(["password", "api_key", "apiKey", "secret", "auth_token", "client_secret",
                                 "aws_secret_access_key", "DB_PASSWORD", "passwd", "credentials"]))
    if kind == "kv":
        sep = draw(st.sampled_from(["=", " = ", ": ", ":="]))
        return f"{name}{sep}{value}", value
    if kind == "json":
        value = value.replace('"', "").replace("\\", "") or "x1"
        return f'"{name}": "{value}"', value
    if kind == "env":
        env = draw(st.sampled_from(["FOO_KEY", "MY_SECRET", "GH_TOKEN", "DB_PASSWORD", "X_PASSWD",
                                    "GCP_CREDENTIAL", "SSH_PRIVATE"]))
        return f"{draw(st.sampled_from(['', 'export ']))}{env}={value}", value
    if kind == "pem":
        lines = draw(st.lists(_with_digit(ALNUM + "+/", 16, 64), min_size=1, max_size=4))
        return "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(lines) + "\n-----END RSA PRIVATE KEY-----", lines[0]
    if kind == "basic":
        user = draw(st.text(ALNUM, min_size=1, max_size=12))
        blob = base64.b64encode(f"{user}:{value}".encode()).decode()
        return f"Basic {blob}", blob
    if kind == "url":
        pw = value.replace("@", "").replace("/", "") or "x1"
        return f"https://bob:{pw}@example.com/x", pw
    return f"eyJ{body}.{body[::-1]}.{body}", body


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(prefix=st.text(max_size=60), suffix=st.text(max_size=60), sep=st.sampled_from([" ", "\n", "\t", "  "]),
       secret=planted())
def test_planted_secret_never_survives(prefix, suffix, sep, secret):
    text, part = secret
    assume(part not in prefix and part not in suffix and part not in REDACTED_MARK)
    out = redact(prefix + sep + text + sep + suffix)
    assert part not in out
    assert REDACTED_MARK in out
