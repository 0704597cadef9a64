"""The generic scanner: ``password = hunter2``-style assignments, whatever the syntax.

No vendor format names these values, so the scanner reads the key: it finds the keywords
(``pass``, ``secret``, ``token``, ``key``, ``cred``, ``pin``, ...), grows each hit to the
identifier around it (``DB_PASSWORD``, ``aws.secretKey``, ``--password``), classifies the
identifier (a password, an API key, a secret, or just "key", a weak hint), and reads the
value after an operator in prose, YAML, JSON, INI, TOML, XML or ``.env`` syntax.  The value
then has to look like a secret of that family (``generic_value_ok``): long enough, not a
placeholder, reference, path, URL, digest, version or type hint.

Linear in the text: identifiers are bounded (``_MAX_IDENT``), each identifier start is read
once, and the value regex is bounded (200 characters).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from rag_assets.privacy.secrets.values import (
    DIGEST_PREFIX_RE,
    PATH_RE,
    PUBKEY_PREFIX,
    TYPE_HINT_RE,
    URL_RE,
    aws_secret_ok,
    entropy,
    is_fake_token,
    is_placeholder,
    password_shaped,
    token_shaped,
)

_PASSWORD_PARTS = frozenset(
    "password passwd pass pwd pw pswd psw passphrase passcode passwort contrasena contraseña senha motdepasse "
    "pin storepass keypass srcstorepass deststorepass".split()
)
# An all-in-one part ending in one of these (PGPASSWORD, mysecret, csrftoken) names it too.
_PASSWORD_SUFFIXES = ("password", "passwd", "passphrase")
_SECRET_SUFFIXES = ("secret", "token")
_SECRET_PARTS = frozenset(
    "secret token credential credentials creds apikey apitoken apisecret secretkey accesskey privatekey authkey "
    "authtoken accesstoken refreshtoken clientsecret sessionkey masterkey encryptionkey signingkey "
    "webhooksecret sastoken bearertoken".split()
)
_KEY_QUALIFIERS = frozenset(
    "api access secret private auth client encryption signing master account app service license storage "
    "shared subscription session consumer webhook deploy sas primary secondary admin hmac crypt".split()
)
# A keyword followed by one of these names something about the secret, not the secret itself.
_SUFFIX_EXCLUDE = frozenset(
    """
    id ids name names file filename files path dir directory url uri urls endpoint host hosts type types
    length len size count expiry expires expiration expire expired ttl timeout lifetime age policy policies
    hint field fields header headers env var vars variable variables prompt reset required min max hash hashed
    hasher hashing digest label placeholder input format regex pattern enabled enable disabled disable command
    cmd manager store helper provider limit limits usage kind mode generator validator validation strength
    rotation ref reference template version prefix suffix location source arn mount query param params
    parameter parameters option options flag flags index position rule rules scope scopes method methods style
    class icon button link form text description desc doc docs spec schema examples sample stdin through thru
    by counter budget estimate estimator encoding encoder decoder tokenizer tokenize tokenized tokens
    window list lists map provided present set exists missing valid invalid changed secretref
    """.split()
)
_PREFIX_EXCLUDE = frozenset(
    "public pub max min num n count use has is show enable disable allow require hide toggle no total ask prompt "
    "forgot".split()
)

# Substrings that start every secret-naming identifier part ("pw" also finds "pwd").
KEYWORDS = ("pass", "pw", "psw", "secret", "token", "key", "cred", "contrase", "senha", "pin")


@functools.lru_cache(maxsize=1)  # the structured scanner asks again for the same text
def keyword_hits(low: str) -> tuple[tuple[int, int], ...]:
    """Where the keywords occur: one str.find loop each beats one regex alternation."""
    hits = []
    for kw in KEYWORDS:
        i = low.find(kw)
        while i >= 0:
            hits.append((i, i + len(kw)))
            i = low.find(kw, i + 1)
    return tuple(hits)


_MAX_IDENT = 64
_IDENT_CHAR_RE = re.compile(r"[A-Za-z0-9_.\-]{0,64}")
_IDENT_HEAD_RE = re.compile(r"(?<![A-Za-z0-9_.\-])[A-Za-z0-9_.\-]{0,64}$")
_CAMEL_SPLIT_RE = re.compile(r"[_.\-]+|(?<=[a-z0-9])(?=[A-Z])")
_PREV_WORD_RE = re.compile(r"([A-Za-z]+)[ \t]$")
_SENTENCE_GOES_ON_RE = re.compile(r"[ \t]+[A-Za-z(]")

# What follows a keyword: optional closing quote/bracket, an operator, the value.
_AFTER_RE = re.compile(
    r"""
    (?P<close>\\?["'`]?\]?\*{0,2})
    (?:                                             # in this order: "is" must not be read as a value
        [ \t]{0,4}(?P<op>:=|::|=>|==|!=|=|:|->|,)
      | (?P<prose>(?:[ \t]+(?:for|of|on|at|to)[ \t]+[^\n:=]{1,40}?)?[ \t]+(?:is|was|are|were)
                  (?:[ \t]+(?:set[ \t]+to|now|still))?(?:[ \t]*[:\-])?)
      | [ \t]+(?P<ws>)
    )
    [ \t]{0,4}\*{0,2}[ \t]{0,4}
    (?:
        \\?"(?P<dq>[^"\n\\]{1,200})\\?"
      | '(?P<sq>[^'\n]{1,200})'
      | `(?P<bq>[^`\n]{1,200})`
      | (?P<bare>[^\s"'`<>;]{1,200})
    )
    """,
    re.X | re.I,
)


def _ident_end(text: str, pos: int) -> int:
    """Where the identifier characters from ``pos`` end (at most 64 on)."""
    m = _IDENT_CHAR_RE.match(text, pos)
    assert m is not None  # {0,64}: it matches, empty at the least
    return m.end()


def ident_parts(ident: str) -> list[str]:
    return [p.lower() for p in _CAMEL_SPLIT_RE.split(ident) if p]


def classify_ident(parts: list[str]) -> str | None:
    """``generic_password`` / ``generic_api_key`` / ``generic_secret`` for a secret-naming key, else None."""
    if not parts:
        return None
    last_kw = -1
    family: str | None = None
    for i, part in enumerate(parts):
        if part in _PASSWORD_PARTS or part.endswith(_PASSWORD_SUFFIXES):
            family, last_kw = "generic_password", i
        elif part in _SECRET_PARTS or part.endswith(_SECRET_SUFFIXES):
            family = "generic_api_key" if part.startswith("api") else "generic_secret"
            last_kw = i
        elif part in ("key", "keys") and i > 0 and parts[i - 1] in _KEY_QUALIFIERS:
            family = "generic_api_key" if parts[i - 1] == "api" else "generic_secret"
            last_kw = i
        elif part == "key" and family is None:
            # STRIPE_KEY, license_key, "key": a weak hint, so the value must look random (below).
            family, last_kw = _WEAK_KEY, i
    if family is None:
        return None
    if any(p in _SUFFIX_EXCLUDE for p in parts[last_kw + 1 :]):
        return None
    if any(p in _PREFIX_EXCLUDE for p in parts[:last_kw]):
        return None
    return family


_WEAK_KEY = "weak_key"  # the family of identifiers whose only hint is the word "key"


def spans(text: str, low: str) -> Iterable[tuple[int, int, str]]:
    """``password = hunter2``-style findings: (start, end, kind) of each value."""
    seen_idents: set[int] = set()
    kinds: dict[str, tuple[str | None, list[str]]] = {}  # per call: identifiers repeat within a text
    for hit_start, hit_end in keyword_hits(low):
        # Grow the hit to the whole identifier around it (DB_PASSWORD, aws.secretKey, --password).
        # Bounded: a keyword inside a long run (base64 data, minified code) names nothing, and an
        # unbounded walk back from every hit in such a run would be quadratic.
        head = _IDENT_HEAD_RE.search(text, max(0, hit_start - _MAX_IDENT), hit_start)
        if head is None:
            continue
        start = head.start()
        if start in seen_idents:
            continue
        seen_idents.add(start)
        end = _ident_end(text, hit_end)
        if end - start > _MAX_IDENT + hit_end - hit_start or _ident_end(text, end) != end:
            continue
        if start > 0 and text[start - 1] in "/\\":
            continue  # /etc/mosquitto/passwd is a path, not a key
        ident = text[start:end].strip(".-")
        cached = kinds.get(ident)
        if cached is None:
            parts = ident_parts(ident)
            cached = kinds[ident] = (classify_ident(parts), parts)
        kind, parts = cached
        if parts in (["key"], ["keys"]):  # "API key: ...", "secret key is ...": the word before decides
            prev = _PREV_WORD_RE.search(text, max(0, start - 24), start)
            if prev is not None:
                kind = classify_ident([prev.group(1).lower(), *parts])
        if kind is None:
            continue
        m = _AFTER_RE.match(text, end)
        if m is None:
            continue
        value_group = next(g for g in ("dq", "sq", "bq", "bare") if m.group(g) is not None)
        v_start, v_end = m.span(value_group)
        value = m.group(value_group)
        quoted = value_group != "bare"
        op = "prose" if m.group("prose") is not None else ("ws" if m.group("ws") is not None else m.group("op"))
        if not quoted:
            if start > 0 and text[start - 1] in "?&":  # a URL query: the value ends at the next parameter
                cut = re.split(r"[&#]", value, maxsplit=1)[0]
                v_end -= len(value) - len(cut)
                value = cut
            # Sentence punctuation after a value in prose is not part of it; in a config line
            # ("password: s3cr3t!") only a trailing comma or an unbalanced bracket is dropped.
            stripped = _strip_trailing_punctuation(value, ".,;:!?*)]}" if op in ("prose", "ws") else ",;)]}")
            v_end -= len(value) - len(stripped)
            value = stripped
        opening = text[start - 1] if start > 0 and text[start - 1] in "\"'`" else ""
        if op == "," and not (opening and quoted):
            continue  # only f("api_token", "value"): a comma after a bare word is a list
        if quoted and (value[:1].isspace() or value[-1:].isspace()):
            continue  # "` | :broom: | `": text between two unrelated quotes, not a quoted value
        if opening and quoted and opening not in m.group("close"):
            # The key sits inside a string literal ("Password: " + getPassword()): the quote
            # after it closes that literal, so what follows is code, not the value.
            continue
        if op in (":", "=") and not quoted and _SENTENCE_GOES_ON_RE.match(text, v_end):
            op = "prose"  # "Password: must be 8 characters long" is a sentence, not a value
        if generic_value_ok(value, quoted, op, kind, parts):
            looks_aws = len(value) == 40 and ("aws" in parts or "access" in parts)
            if kind != "generic_password" and looks_aws and aws_secret_ok(value):
                kind = "aws_secret_access_key"
            yield v_start, v_end, "generic_api_key" if kind == _WEAK_KEY else kind


def _strip_trailing_punctuation(value: str, chars: str) -> str:
    """Drop ``chars`` from the end of a bare value, keeping closers that close something."""
    while value and value[-1] in chars:
        closer = value[-1]
        opener = {")": "(", "]": "[", "}": "{"}.get(closer)
        if opener and value.count(opener) >= value.count(closer):
            break
        value = value[:-1]
    return value


_WEAK_KEY_VALUE_RE = re.compile(r"^[A-Za-z0-9+/=_\-]+$")
_DIGIT_RE = re.compile(r"[0-9]")
_VERSION_RE = re.compile(r"^[v=^~<>]*\d+(?:\.[\dx*]+)+(?:[-+][\w.]+)?$")


# The shortest value each family accepts (see the branches of generic_value_ok).
_MIN_VALUE_LENGTH = {"generic_password": 4, _WEAK_KEY: 20}
_MIN_TOKEN_LENGTH = 8  # the other families: token_shaped(v, min_len=8)


def _weak_key_shaped(v: str) -> bool:
    """Upper, lower and digits in key characters only (no words), before the costlier checks."""
    # ASCII once _WEAK_KEY_VALUE_RE matched, so the case tests can be C-level comparisons.
    return (
        _WEAK_KEY_VALUE_RE.match(v) is not None
        and v.lower() != v  # an upper-case letter
        and v.upper() != v  # a lower-case letter
        and _DIGIT_RE.search(v) is not None
    )


def generic_value_ok(value: str, quoted: bool, op: str, kind: str, parts: list[str]) -> bool:
    v = value.strip()
    if not v or "REDACTED" in v:
        return False
    # Cheap shape tests first: every branch below requires them, and the placeholder checks
    # cost tens of microseconds, paid at every keyword of "key=key=..." or ";pwd=x;pwd=x".
    if len(v) < _MIN_VALUE_LENGTH.get(kind, _MIN_TOKEN_LENGTH):
        return False
    if kind == _WEAK_KEY and not _weak_key_shaped(v):
        return False
    if op in ("==", "!=") and not quoted:
        return False  # comparisons with a bare name are code, not values
    if is_placeholder(v) or v.startswith(("$", "%")) or PATH_RE.match(v) or URL_RE.match(v):
        return False
    if DIGEST_PREFIX_RE.match(v) or v.startswith(PUBKEY_PREFIX):
        return False
    if _VERSION_RE.match(v):
        return False  # pin: 1.2.3
    if TYPE_HINT_RE.match(v) and (v[:1].isupper() or not quoted):
        return False  # password: str, token: Optional[str], api_key: SecretStr
    if kind == "generic_password":
        if len(v) < 4:
            return False
        if op == "ws":
            # "with the password 8LzM...", "--password X": a bare password word, then a value
            # that has letters and digits (not "zigbee2mqtt"-after-a-path, see spans).
            if len(parts) != 1 or not (parts[0] in _PASSWORD_PARTS or parts[0].endswith(_PASSWORD_SUFFIXES)):
                return False
            return quoted or (password_shaped(v) and v[0].isalnum() and any(c.isdigit() for c in v))
        if op == "prose":
            if v.isdigit() and parts[-1] == "pin":
                return len(v) >= 4
            return quoted or password_shaped(v)
        if quoted:
            return len(v) <= 128
        if v.isdigit():
            return len(v) >= (4 if parts[-1] == "pin" else 6)  # a PIN is short; other digits-only are ids
        if v.isalpha() and not v.islower() and not v.isupper() and v[0].isupper() and not password_shaped(v):
            return False  # "password: SecretStr"-like class names
        return True
    if kind == _WEAK_KEY:  # random-looking (length and _weak_key_shaped checked above), high entropy
        return entropy(v) >= 3.7 and not is_fake_token(v)
    # token / secret / api key: must look generated, whatever the syntax
    if op in ("prose", "ws") and not quoted and not token_shaped(v, min_len=12):
        return False
    return token_shaped(v, min_len=8) and not is_fake_token(v)
