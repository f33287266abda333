"""An API key goes only to the server it was configured for.

``embedding.api_key`` and ``llm.api_key`` are bearer tokens for a third party. If the base URL
next to a key changes while the key stays (an edited config.yaml, a ``MEMLANE_*__BASE_URL``
variable from another shell), sending the key would hand it, and the memory texts, to the new
host. So each key is bound to the origin (scheme, host, port) of the base URL it was first used
with, and is sent nowhere else:

* the first time a daemon (or any command that opens the store) sees a key, the key's SHA-256
  and its base URL's origin are recorded in ``$MEMLANE_HOME/key-bindings.json`` (mode 0600);
  a key never seen before (the user entered a new one) is bound to the base URL it comes with;
* a key already bound is sent only to its origin, in either section and for good: with any
  other origin it is withheld (the provider is built without it) and a warning names both
  origins and the two ways on: put a key for the new server in config.yaml, or run
  ``memlane config --bind-keys`` to move this key's binding there.

Only sections whose provider sends the key are checked (``openai``: the key is an
``Authorization: Bearer`` header); Ollama sends no key. The extraction LLM inherits
``llm.api_key`` only when it uses ``llm``'s own provider and base URL
(:func:`memlane.config.pipeline.extraction_llm_settings`).

The recorded hash identifies a key without storing it; API keys are long random strings, so
the hash does not help anyone guess one (and the key itself sits beside it in config.yaml).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import httpx
from pydantic import SecretStr

from memlane.config import Settings
from memlane.embedding.openai_compat import DEFAULT_BASE_URL as EMBEDDING_OPENAI_URL
from memlane.errors import ConfigError
from memlane.fsutil import atomic_write
from memlane.providers.openai_compat import DEFAULT_BASE_URL as LLM_OPENAI_URL

log = logging.getLogger(__name__)

#: File name of the bindings inside the home.
BINDINGS_FILE = "key-bindings.json"
#: Settings sections whose ``api_key`` is bound, with the default base URL of each provider
#: that sends the key (an empty ``base_url`` means that default).
KEYED_SECTIONS: dict[str, dict[str, str]] = {
    "embedding": {"openai": EMBEDDING_OPENAI_URL},
    "llm": {"openai": LLM_OPENAI_URL},
}


def bindings_path(home: Path) -> Path:
    """``{home}/key-bindings.json``."""
    return Path(home) / BINDINGS_FILE


def origin(url: str) -> str:
    """``scheme://host[:port]`` of ``url``, lower-case, the scheme's default port left out; a
    string that is not a URL is returned stripped (it then only matches itself)."""
    try:
        u = httpx.URL(url.strip())
    except (httpx.InvalidURL, TypeError, ValueError):
        return url.strip()
    if not u.scheme or not u.host:
        return url.strip()
    scheme, host = u.scheme.lower(), u.host.lower()
    host = f"[{host}]" if ":" in host else host
    port = None if u.port == {"http": 80, "https": 443}.get(scheme) else u.port
    return f"{scheme}://{host}" + (f":{port}" if port is not None else "")


def _fingerprint(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _sent_key(settings: Settings, section: str) -> tuple[str, str] | None:
    """(key, origin it would go to) for a section whose provider sends its key, else None."""
    conf = getattr(settings, section)
    key = conf.api_key.get_secret_value()
    default = KEYED_SECTIONS[section].get(conf.provider)
    if not key or default is None:
        return None
    return key, origin(conf.base_url or default)


def read_bindings(home: Path) -> dict[str, str]:
    """The recorded bindings, ``{key_sha256: origin}``; ``{}`` when none.

    Raises:
        ConfigError: the file exists but is not a JSON object (delete it to bind keys anew).
    """
    path = bindings_path(home)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: unreadable ({exc}); delete it to bind the API keys anew") from exc
    keys = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(keys, dict) or not all(isinstance(v, str) for v in keys.values()):
        raise ConfigError(f'{path}: not a {{"keys": {{sha256: origin}}}} object; delete it to bind the API keys anew')
    return dict(keys)


def _write(home: Path, keys: dict[str, str]) -> None:
    data = {"version": 1, "keys": keys}
    atomic_write(bindings_path(home), (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"), mode=0o600)


def enforce_key_bindings(settings: Settings) -> list[str]:
    """Bind new keys to their base URL; withhold a key whose base URL changed.

    Mutates ``settings``: a withheld key's section is replaced by a copy with an empty
    ``api_key`` (so every provider built from ``settings`` afterwards goes without it). Records
    new bindings in ``{home}/key-bindings.json`` (the home must exist).

    Returns:
        One warning per withheld key (also logged), naming the section, both origins and the fix.
    Raises:
        ConfigError: the bindings file is unreadable.
        OSError: a new binding could not be written.
    """
    sent_keys = {section: sent for section in KEYED_SECTIONS if (sent := _sent_key(settings, section))}
    if not sent_keys:
        return []
    bindings = read_bindings(settings.home)
    warnings: list[str] = []
    changed = False
    for section, (key, target) in sent_keys.items():
        digest = _fingerprint(key)
        bound_to = bindings.get(digest)
        if bound_to is None:
            bindings[digest] = target
            changed = True
        elif bound_to != target:
            conf = getattr(settings, section)
            setattr(settings, section, conf.model_copy(update={"api_key": SecretStr("")}))
            msg = (
                f"{section}.api_key is bound to {bound_to} (where it was first used), but "
                f"{section}.base_url now points at {target}: the key is not sent. Put the key for "
                f"{target} in config.yaml (or MEMLANE_{section.upper()}__API_KEY), or run "
                f"`memlane config --bind-keys` to send this key to {target}."
            )
            log.warning(msg)
            warnings.append(msg)
    if changed:
        _write(settings.home, bindings)
    return warnings


def bind_keys(settings: Settings) -> dict[str, str]:
    """Bind each configured key to its section's current base URL (the user's explicit consent,
    given by ``memlane config --bind-keys``).

    Returns:
        ``{section: origin}`` for every key bound (sections without a sent key are left out). A
        key two sections send to different origins ends bound to the ``llm`` one.
    Raises:
        ConfigError: the bindings file is unreadable.
        OSError: the file could not be written.
    """
    settings.home.mkdir(mode=0o700, parents=True, exist_ok=True)
    bindings = read_bindings(settings.home)
    bound: dict[str, str] = {}
    for section in KEYED_SECTIONS:
        sent = _sent_key(settings, section)
        if sent is None:
            continue
        key, target = sent
        bindings[_fingerprint(key)] = target
        bound[section] = target
    if bound:
        _write(settings.home, bindings)
    return bound
