"""Value checks: is a candidate a real secret, or a placeholder, a reference or a made-up token?

The rules' named checks (checks.py) and the generic scanner (generic.py) ask these of a
value once a regex has found it.  They look at the value alone, never at the text around it
(context.py does that), so each costs time linear in the value.
"""

from __future__ import annotations

import base64
import binascii
import functools
import math
import re
from collections import Counter

# Words that, as a whole value, are documentation stand-ins rather than secrets.
_PLACEHOLDER_WORDS = frozenset(
    """
    password passwd pass pwd secret secrets token tokens apikey api_key api-key key keys value
    changeme change_me change-me changeit example sample placeholder dummy none null nil
    undefined empty redacted masked hidden omitted removed todo tbd fixme test testing
    mypassword my_password my-password mysecret my_secret my-secret mytoken my_token
    yourpassword your_password yoursecret your_secret yourtoken your_token
    secretpassword supersecret topsecret s3cr3t p@ssw0rd p@ssword passw0rd password1 password123
    foo bar baz foobar qux xxx yyy zzz abc abcd abc123 1234 12345 123456 admin user username
    string str text int integer number bool boolean object array list dict map bytes
    true false yes no on off required optional default sensitive n/a na e.g i.e etc
    """.split()
)

# Substrings that mark a value as a stand-in ("your-api-key-here", "REPLACE_ME", "<token>").
PLACEHOLDER_SUBSTRINGS = (
    "example",
    "placeholder",
    "changeme",
    "change_me",
    "change-me",
    "replace_me",
    "replaceme",
    "replace-me",
    "replace_with",
    "replace-with",
    "redacted",
    "your_",
    "your-",
    "your ",
    "yourapi",
    "yourkey",
    "yourtoken",
    "yoursecret",
    "yourpass",
    "_here",
    "-here",
    " here",
    "xxxx",
    "****",
    "...",
    "\u2026",
    "\u2022\u2022",
    "not_a_real",
    "not-a-real",
    "notarealkey",
    "insert_",
    "insert-",
    "enter_",
    "enter-",
)

# Environment, template and shell references: the value is a pointer, not the secret.
_REFERENCE_RE = re.compile(
    r"""^(?:
        \$\{[^}]*\}? | \$\([^)]*\)? | \$[A-Za-z_][A-Za-z0-9_]* | %[A-Za-z_][A-Za-z0-9_]*% |
        \{\{.*\}\}? | \{%.*%\} | \{[\w.\-\s]*\} | <[^<>]*> | \[[^\[\]]*\] | \#\{[^}]*\} |
        @[A-Za-z_]\w*@ | __[A-Z0-9_]+__ | %s | %\(\w+\)s | \{\d*\} |
        ![A-Za-z_][\w.]*(?:\s.*)? |                      # YAML tags: !secret db_password, !vault |
        (?:process\.env|os\.environ|os\.getenv|ENV|env|secrets|vars|inputs|config|settings|self|this)\b.* |
        [A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*\(.*\)?      # a call: get_secret(), vault.read(...)
    )$""",
    re.X,
)
_ATTRIBUTE_REF_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")  # settings.SECRET_KEY
_ENV_NAME_RE = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$")  # DB_PASSWORD (a name, not a value)
HEX_RE = re.compile(r"^[0-9a-fA-F]+$")
DIGEST_PREFIX_RE = re.compile(r"^(?:sha\d+|md5|sha|blake2b?|sha3-\d+)[:\-]", re.I)
PATH_RE = re.compile(r"^(?:~?/|\.\.?/|[A-Za-z]:\\|file:)|^[\w.\-]+/$")  # /etc/x, ./x, C:\x, public/
URL_RE = re.compile(r"^[a-z][a-z0-9+.\-]*://", re.I)
PUBKEY_PREFIX = ("ssh-rsa", "ssh-ed25519", "ssh-dss", "ecdsa-sha2", "sk-ssh-", "sk-ecdsa-")
TYPE_HINT_RE = re.compile(
    r"^(?:optional|list|dict|union|sequence|mapping|array|record|promise|secretstr|str|string|bytes)\b", re.I
)
_ENGLISH_COMPOUND_RE = re.compile(r"^[A-Za-z]+(?:[-/'][A-Za-z]+)+$")  # case-sensitive, read/write


def entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(value)
    if not n:
        return 0.0
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def longest_run(value: str) -> int:
    """Longest run of one repeated character ("xxxxxx" -> 6)."""
    best = run = 0
    prev = ""
    for ch in value:
        run = run + 1 if ch == prev else 1
        prev = ch
        if run > best:
            best = run
    return best


@functools.lru_cache(maxsize=256)
def _run_re(length: int) -> re.Pattern[str]:
    return re.compile(rf"(.)\1{{{length - 1}}}", re.S)


def has_run(value: str, length: int) -> bool:
    """``longest_run(value) >= length``, by the regex engine: the generic scanner asks this of
    a value (up to 200 characters) at every keyword, and a Python loop over it dominated
    "key=key=key=..."."""
    if length <= 1:
        return length <= 0 or bool(value)
    return _run_re(length).search(value) is not None


def _longest_sequence(value: str) -> int:
    """Longest run of consecutive code points ("abcdef", "123456")."""
    best = run = 1 if value else 0
    for a, b in zip(value, value[1:], strict=False):
        run = run + 1 if ord(b) == ord(a) + 1 else 1
        if run > best:
            best = run
    return best


def is_reference(value: str) -> bool:
    """An environment/template/shell reference, a call or an attribute path."""
    v = value.strip()
    return bool(_REFERENCE_RE.match(v) or _ATTRIBUTE_REF_RE.match(v) or _ENV_NAME_RE.match(v))


def is_placeholder(value: str) -> bool:
    """A documentation stand-in: the value tells the reader what to put there."""
    v = value.strip().strip("\"'`")
    if not v:
        return True
    low = v.lower()
    if low in _PLACEHOLDER_WORDS or "redacted:" in low:
        return True
    if any(s in low for s in PLACEHOLDER_SUBSTRINGS):
        return True
    if is_reference(v):
        return True
    if len(v) >= 4 and len(set(low)) <= 2:  # "aaaa", "0000", "abab"
        return True
    if len(v) >= 8 and has_run(low, max(5, len(v) // 3)):  # "aaaa...aaend", "zzzzzz"
        return True
    return False


def is_fake_token(body: str) -> bool:
    """The random part of a vendor token is obviously made up (ghp_xxxx, AKIA...EXAMPLE)."""
    low = body.lower()
    if "xxxx" in low or "example" in low or "****" in low or "redacted" in low:
        return True
    if "your" in low and ("key" in low or "token" in low or "secret" in low):
        return True
    if has_run(body, 6):  # AKIAZZZZZZZZZZZZZZZZ, sk_live_AAAA...
        return True
    if len(body) >= 12 and len(set(body)) < 6:
        return True
    # "abcdefgh", "ABCDEF", "123456": typed by a person.  Case-sensitive, so aBcDeF (random
    # case) is not one; six in a row occur in a random 40-character token about once in 10^7.
    return _longest_sequence(body) >= 6


def token_shaped(value: str, min_len: int = 8) -> bool:
    """Looks like a machine-generated credential rather than a word or an identifier."""
    if len(value) < min_len or any(c.isspace() for c in value):
        return False
    has_lower = any(c.islower() for c in value)
    has_upper = any(c.isupper() for c in value)
    has_digit = any(c.isdigit() for c in value)
    if value.isalpha():
        # A letters-only value is an identifier (SecretStr, MySecretName) unless long and random.
        return len(value) >= 16 and has_lower and has_upper and entropy(value) >= 3.5
    if value.isdigit():
        return False
    if not (has_digit or (has_lower and has_upper)):
        return False
    return entropy(value) >= 2.8


def password_shaped(value: str) -> bool:
    """What a password in prose looks like ("is hunter2"), as opposed to an English word."""
    if len(value) < 4 or any(c.isspace() for c in value):
        return False
    if _ENGLISH_COMPOUND_RE.match(value):  # case-sensitive, read/write, don't
        return False
    if value.isdigit():
        return len(value) >= 6
    has_digit = any(c.isdigit() for c in value)
    has_symbol = any(not c.isalnum() for c in value)
    mixed = any(c.isupper() for c in value[1:]) and any(c.islower() for c in value)
    return has_digit or has_symbol or mixed


def b64_decode(value: str, urlsafe: bool = False) -> bytes | None:
    padded = value + "=" * (-len(value) % 4)
    try:
        return base64.urlsafe_b64decode(padded) if urlsafe else base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None


def aws_secret_ok(value: str) -> bool:
    """A 40-character AWS secret access key: mixed classes, not hex, random, not made up."""
    classes = sum((any(c.islower() for c in value), any(c.isupper() for c in value), any(c.isdigit() for c in value)))
    return classes >= 2 and not HEX_RE.match(value) and entropy(value) >= 3.5 and not is_fake_token(value)
