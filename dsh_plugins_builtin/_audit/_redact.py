"""Redaction and the text forms of a row: what the audit writer stores, and how.

Secrets in the arguments are redacted before anything is written: the value of every key whose
name contains one of `SECRET_WORDS` (any case, at any depth) becomes `REDACTED`, and so does
any credential found *in* a text by its shape (`scrub`), whatever its key: the password of a
URL (``https://user:PASSWORD@host``), a token with a known prefix (``ghp_``, ``github_pat_``,
``glpat-``, ``xoxb-``, ``sk-``, ``sk_live_``, ``npm_``, ``pypi-``, ``hf_``), an AWS access key
id, a Google API key, a JSON Web Token, a private key block. A ``bash`` command that passes a
token (``curl -H "Authorization: Bearer ghp_..."``) or a ``write_file`` of a ``.env`` file keeps
its shape in the log without the credential.
"""

from __future__ import annotations

import json
import re
import time
import unicodedata
from collections.abc import Mapping
from typing import Any, Final

from .._common._canonical import canonical

__all__ = [
    "REDACTED",
    "SECRET_WORDS",
    "arguments_json",
    "json_escape",
    "json_safe",
    "redact",
    "safe_text",
    "scrub",
    "timestamp",
]

REDACTED = "[REDACTED]"
SECRET_WORDS = ("key", "token", "secret", "password", "passwd", "auth", "credential")


# Each credential body is made of characters JSON writes as they are (no quote, no backslash
# but a PEM block's escaped newlines), so a match never crosses from one string of a JSON text
# into the next, and the text stays valid JSON with `REDACTED` in its place. The search is
# linear in the text (a model writes it): each alternative starts at a fixed marker ("://", a
# prefix at the start of a word, "-----BEGIN") and runs over characters the next start of the
# same alternative cannot be among (a URL's user stops at "/", a PEM body at "-"); a URL is
# found by its "://", not by its scheme (a run of letters would be tried from each letter).
# A token starts a word: not the "sk-" of "task-list-2024". In JSON text a newline or a tab
# before it is written "\n" or "\t", and a character written escaped (in ASCII, or a format
# character) "\u00e9": their last letter or digit would look like the word going on.
_EDGE = r"(?:(?<![A-Za-z0-9_-])|(?<=\\[nrtbf])|(?<=\\u[0-9A-Fa-f]{4}))"
_UNICODE_ESCAPE = r"\\u[0-9A-Fa-f]{4}"  # a character of a URL's user or password, escaped
_CREDENTIALS: Final = re.compile(
    rf"(?P<url>://(?:[^/\s:@\"\\]|{_UNICODE_ESCAPE})*:)(?:[^/\s@\"\\]|{_UNICODE_ESCAPE})+(?=@)"
    rf"|{_EDGE}(?:gh[pousr]_|github_pat_|glpat-|xox[abposr]-|sk-|sk_live_|rk_live_|npm_|pypi-|hf_)"
    r"[A-Za-z0-9_-]{16,}"
    rf"|{_EDGE}(?:AKIA|ASIA)[A-Z0-9]{{16}}(?![A-Za-z0-9])"
    rf"|{_EDGE}AIza[0-9A-Za-z_-]{{35}}"
    rf"|{_EDGE}eyJ[A-Za-z0-9_-]{{8,}}\.eyJ[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]+"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[A-Za-z0-9+/=\s\\]*?-----END [A-Z ]*PRIVATE KEY-----"
)


_MARKERS: Final = re.compile(
    r"://|-----BEGIN|gh[pousr]_|github_pat_|glpat-|xox|sk[-_]|rk_live_|npm_|pypi-|hf_|AKIA|ASIA"
    r"|AIza|eyJ"
)
"""What every credential shape holds, without the rest: a text with none (nearly every one)
is let through after one quick search."""


def scrub(text: str) -> str:
    """*text* with each credential found by its shape replaced by `REDACTED` (a URL keeps its
    user name and host, and loses its password)."""
    if not _MARKERS.search(text) or not _CREDENTIALS.search(text):
        return text
    return _CREDENTIALS.sub(lambda m: (m.group("url") or "") + REDACTED, text)


def redact(value: Any) -> Any:
    """A plain copy of the JSON *value* with the values of secret-named keys replaced, at any depth."""
    if isinstance(value, Mapping):
        return {key: REDACTED if _is_secret(key) else redact(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [redact(item) for item in value]
    return value


_SECRET = re.compile("|".join(SECRET_WORDS))
_secret_keys: dict[str, bool] = {}
"""Whether a key names a secret, by key: the keys of tool arguments repeat from call to call."""
_SECRET_KEYS_KEPT: Final = 4_096
_SCALARS: Final = frozenset({str, int, float, bool, type(None)})


def _is_secret(key: object) -> bool:
    if type(key) is str:
        known = _secret_keys.get(key)
        if known is not None:
            return known
    secret = _SECRET.search(str(key).casefold()) is not None
    if type(key) is str and len(_secret_keys) < _SECRET_KEYS_KEPT:  # bounded: keys come from
        _secret_keys[key] = secret  # the model, which may send a new one every call
    return secret


def _redacted(value: Any) -> Any:
    """`redact`, but *value* itself (not a copy) when nothing in it is secret: the common case.

    One walk to look, and one more to copy only when something is secret (linear in the
    arguments whatever their depth).
    """
    return redact(value) if _holds_secret(value) else value


def _holds_secret(value: Any) -> bool:
    """Whether some key at any depth of *value* names a secret (stops at the first)."""
    if type(value) in _MAPPINGS or _is_mapping(value):
        for key, item in value.items():
            if _is_secret(key) or (type(item) not in _SCALARS and _holds_secret(item)):
                return True
    elif isinstance(value, list | tuple):
        for item in value:
            if type(item) not in _SCALARS and _holds_secret(item):
                return True
    return False


_MAPPINGS: set[type] = {dict}
"""The classes found to be a `Mapping` (the arguments' frozen mapping, mostly): a class is
checked against the ABC once (its check costs more than the rest of a small object's walk); a
class that is one stays one (an ABC cannot unregister it)."""
_MAPPINGS_KEPT: Final = 64


def _is_mapping(value: Any) -> bool:
    """``isinstance(value, Mapping)``, remembering a class that is one (`_MAPPINGS`)."""
    if not isinstance(value, Mapping):
        return False
    if len(_MAPPINGS) < _MAPPINGS_KEPT:
        _MAPPINGS.add(type(value))
    return True


def arguments_json(arguments: Any, known: str | None = None) -> str:
    """Canonical JSON of the redacted *arguments*, storable as SQLite text, losslessly; *known*:
    the canonical JSON of *arguments* themselves, if made already (used when none is secret).

    Non-ASCII text is kept as it is, unless the value holds a lone surrogate (valid JSON, but not
    encodable as UTF-8): then the whole text is ASCII with ``\\uXXXX`` escapes, which
    ``json.loads`` turns back into the same value. Controls and format characters JSON leaves
    raw (DEL, C1, bidirectional overrides, ...) are escaped likewise (`json_safe`).

    Raises:
        ValueError, RecursionError, TypeError: the value cannot be written as JSON.
    """
    value = _redacted(arguments)
    text = known if known is not None and value is arguments else canonical(value)
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return scrub(json_safe(text))  # the text as written: a way of writing it keeps nothing


def safe_text(text: str | None) -> str | None:
    """*text* as the short text columns store it (`tool`, `call_id`, `decision`, ...): every
    character that could act on a terminal or hide text when the column is printed raw (C0 and
    C1 controls, NUL, DEL, format characters such as bidirectional overrides, line and paragraph
    separators) becomes its escape, ``\\u001b`` (``\\U000e0041`` above U+FFFF), as does a lone
    surrogate (which SQLite text cannot hold). Printable text is returned as it is."""
    if text is None or text.isprintable():
        return text
    return "".join(_escape(c) if _category(c) in _ESCAPED else c for c in text)


_ESCAPED: Final = frozenset(("Cc", "Cf", "Cs", "Zl", "Zp"))
"""The Unicode categories `safe_text` escapes: controls, format, surrogates, separators."""
_category = unicodedata.category


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def json_escape(char: str) -> str:
    """*char* as a JSON string escape (a surrogate pair above U+FFFF)."""
    code = ord(char)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_safe(text: str) -> str:
    """JSON *text* with every character `safe_text` escapes written as a JSON escape: still
    valid JSON, read back (``json.loads``) as the same value. JSON escapes C0 controls itself;
    DEL, C1 controls and format characters it leaves raw."""
    if text.isprintable():
        return text
    return "".join(json_escape(c) if _category(c) in _ESCAPED else c for c in text)


_seconds: tuple[int, str] = (-1, "")
_MILLISECONDS: Final = tuple(f".{ms:03d}Z" for ms in range(1000))
"""The end of a `timestamp` by its milliseconds (formatting them cost more than the rest)."""


def timestamp(wall: float) -> str:
    """``2026-05-09T07:35:25.123Z`` (UTC, milliseconds); the seconds part is formatted once."""
    global _seconds
    second = int(wall)
    cached, prefix = _seconds
    if cached != second:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _seconds = (second, prefix)
    return prefix + _MILLISECONDS[int((wall - second) * 1000)]
