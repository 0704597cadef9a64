"""Find and redact secrets (and e-mail addresses) in Markdown text for the Safe tier.

The sanitiser calls :meth:`SecretDetector.redact` on every chunk, title, tag and
frontmatter value of every Safe-tier note, so the detector has to be both careful
(a leaked token in the store cannot be taken back) and fast (it runs on everything).

How it works
------------
Two sources of findings, merged into one sorted list of non-overlapping spans:

* **Own rules** (``_RULES``): gitleaks/secretlint-style regexes, one per token family
  (AWS, GitHub, GitLab, Slack, Stripe, OpenAI, Google, ...), structured rules
  (private-key blocks, JWTs, URIs and connection strings with a password, ``curl -u``,
  ``Authorization:`` headers, recovery codes, e-mails) and one *generic* scanner for
  ``password``/``secret``/``token``/``api_key``/``PIN`` assignments in prose, YAML,
  JSON, INI, TOML, XML and ``.env`` files.  Every rule names literal *triggers*, one of
  which must occur in the text (for token rules: in the long runs of token characters,
  about 15% of a Markdown text) before its regex runs, and anchored regexes start with a
  literal ("://", "@") so the regex engine can jump between candidates: most chunks wake
  up two or three rules, and the per-call cost is mostly ``str in str`` scans (C speed).
  Candidates then go through value checks that drop what a sanitiser must leave alone:
  placeholders (``<password>``, ``xxxx``, ``your-api-key-here``, ``changeme``, ``****``,
  ``...EXAMPLE``), environment and template references (``${X}``, ``$X``, ``%X%``,
  ``$(cmd)``, ``{{ x }}``, ``!secret x``), calls and attribute paths, type hints,
  hashes/UUIDs/digests/versions unless a keyword says "secret", and public keys.
  The cost stays linear in the text, whatever it holds: a rule that needs context around
  a match (the rest of a connection string, a URL's scheme, the line) reads a window of
  ``_CONTEXT`` characters, never the whole line, and gaps inside regexes are bounded, so
  one match never re-reads the text (``rag_assets_tests/test_sanitizer_linear.py``).
* **detect-secrets** (Yelp): its plugins are used *directly*: plugin objects built
  once, their compiled ``denylist`` patterns run over the whole text with offsets taken
  from the regex groups, and the library's default heuristic filters applied
  (sequential strings, UUIDs, ``*_id`` keys, templated and ``$``-prefixed values,
  indirect references, non-alphanumeric values).  We do not call
  ``detect_secrets.core.scan.scan_line``: it scans one line, mutates the library's
  process-wide settings singleton (global state, not thread-safe), returns values
  without offsets, and its ad-hoc "eager" mode drops the entropy limit for unquoted
  words, which flags almost every clean line.  Next to the own rules (the default),
  detect-secrets findings must also pass the own placeholder checks.

Why the default runs only two detect-secrets plugins
----------------------------------------------------
Measured with ``bench/secrets.py`` (the shared corpus: 113 flag and 70 clean cases; not a
held-out estimate any more, since some rules were adjusted after reading which cases they
missed, so expect lower recall on unseen formats;
throughput: ``redact`` over the 994 Hugo documentation ``.md`` files, 1.7 MB, no real
secrets, median of 3 runs on a 2-CPU box):

===============================  ======  =======  ========  =============
mode                             recall  FP rate  MB/s      hugo findings
===============================  ======  =======  ========  =============
detect-secrets alone (all)       0.664   0.243    1.7       7 (SRI hashes)
own rules alone                  1.000   0.000    12-15     15 (e-mails)
own rules + Artifactory/Discord  1.000   0.000    12-14     15 (e-mails)
own rules + every ds plugin      1.000   0.029    1.4       15 (e-mails)
===============================  ======  =======  ========  =============

Every detect-secrets plugin together costs ~9x the time of the own rules and adds false
positives (its keyword plugin, its header-only private-key and length-blind Slack
patterns) but no recall on this corpus.  Its keyword-context plugins (Cloudant, IBM
Cloud IAM, IBM COS, SoftLayer) each cost more than all own rules together and are
covered by the generic ``api_key``/``secret`` scanner and the URI rule.  So the default
keeps the two token families the own rules do not have (``DEFAULT_DS_PLUGINS``:
Artifactory ``AKC...``/``AP...`` and Discord bot tokens), behind literal prefilters so
they cost almost nothing.  ``SecretDetector(ds_plugins="all")`` runs everything.

Known gaps, on purpose
----------------------
* Bare high-entropy strings with no keyword, prefix or structure around them are not
  flagged: in technical notes they are overwhelmingly hashes, ids and base64 data.
* A UUID or hex digest is flagged only when a keyword names it a secret
  (``api_key: <uuid>``, Heroku-style); a bare one, or one under ``id``/``sha256``, is not.
* A value split across two chunks may escape a rule that needs its surroundings
  (``password:`` at the end of one chunk); a PEM block cut by a chunk boundary is still
  redacted from its header to the end of its base64 lines.
* Personal data other than e-mail addresses (IBANs, phone numbers, names) is out of
  scope here; hosts and names are the identity map's job.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

__all__ = ["SecretFinding", "Redaction", "SecretDetector", "masked_preview", "DEFAULT_DS_PLUGINS"]


# --------------------------------------------------------------------------------------
# Public data types
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SecretFinding:
    """One secret: ``text[start:end]`` is the value to redact."""

    kind: str
    start: int
    end: int
    rule: str


@dataclass(frozen=True)
class Redaction:
    """The redacted text and how many findings of each kind were replaced."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)


# --------------------------------------------------------------------------------------
# Value checks shared by the rules
# --------------------------------------------------------------------------------------

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
_PLACEHOLDER_SUBSTRINGS = (
    "example", "placeholder", "changeme", "change_me", "change-me", "replace_me", "replaceme",
    "replace-me", "replace_with", "replace-with", "redacted", "your_", "your-", "your ",
    "yourapi", "yourkey", "yourtoken", "yoursecret", "yourpass", "_here", "-here", " here",
    "xxxx", "****", "...", "\u2026", "\u2022\u2022",
    "not_a_real", "not-a-real", "notarealkey", "insert_", "insert-", "enter_", "enter-",
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
_HEX_RE = re.compile(r"^[0-9a-fA-F]+$")
_DIGEST_PREFIX_RE = re.compile(r"^(?:sha\d+|md5|sha|blake2b?|sha3-\d+)[:\-]", re.I)
_PATH_RE = re.compile(r"^(?:~?/|\.\.?/|[A-Za-z]:\\|file:)|^[\w.\-]+/$")  # /etc/x, ./x, C:\x, public/
_URL_RE = re.compile(r"^[a-z][a-z0-9+.\-]*://", re.I)
_PUBKEY_PREFIX = ("ssh-rsa", "ssh-ed25519", "ssh-dss", "ecdsa-sha2", "sk-ssh-", "sk-ecdsa-")
_TYPE_HINT_RE = re.compile(
    r"^(?:optional|list|dict|union|sequence|mapping|array|record|promise|secretstr|str|string|bytes)\b", re.I
)
_ENGLISH_COMPOUND_RE = re.compile(r"^[A-Za-z]+(?:[-/'][A-Za-z]+)+$")  # case-sensitive, read/write


def _entropy(value: str) -> float:
    """Shannon entropy in bits per character."""
    n = len(value)
    if not n:
        return 0.0
    return -sum(c / n * math.log2(c / n) for c in Counter(value).values())


def _longest_run(value: str) -> int:
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


def _has_run(value: str, length: int) -> bool:
    """``_longest_run(value) >= length``, by the regex engine: the generic scanner asks this of
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


def _is_reference(value: str) -> bool:
    """An environment/template/shell reference, a call or an attribute path."""
    v = value.strip()
    return bool(_REFERENCE_RE.match(v) or _ATTRIBUTE_REF_RE.match(v) or _ENV_NAME_RE.match(v))


def _is_placeholder(value: str) -> bool:
    """A documentation stand-in: the value tells the reader what to put there."""
    v = value.strip().strip("\"'`")
    if not v:
        return True
    low = v.lower()
    if low in _PLACEHOLDER_WORDS or "redacted:" in low:
        return True
    if any(s in low for s in _PLACEHOLDER_SUBSTRINGS):
        return True
    if _is_reference(v):
        return True
    if len(v) >= 4 and len(set(low)) <= 2:  # "aaaa", "0000", "abab"
        return True
    if len(v) >= 8 and _has_run(low, max(5, len(v) // 3)):  # "aaaa...aaend", "zzzzzz"
        return True
    return False


def _is_fake_token(body: str) -> bool:
    """The random part of a vendor token is obviously made up (ghp_xxxx, AKIA...EXAMPLE)."""
    low = body.lower()
    if "xxxx" in low or "example" in low or "****" in low or "redacted" in low:
        return True
    if "your" in low and ("key" in low or "token" in low or "secret" in low):
        return True
    if _has_run(body, 6):  # AKIAZZZZZZZZZZZZZZZZ, sk_live_AAAA...
        return True
    if len(body) >= 12 and len(set(body)) < 6:
        return True
    # "abcdefgh", "ABCDEF", "123456": typed by a person.  Case-sensitive, so aBcDeF (random
    # case) is not one; six in a row occur in a random 40-character token about once in 10^7.
    return _longest_sequence(body) >= 6


def _token_shaped(value: str, min_len: int = 8) -> bool:
    """Looks like a machine-generated credential rather than a word or an identifier."""
    if len(value) < min_len or any(c.isspace() for c in value):
        return False
    has_lower = any(c.islower() for c in value)
    has_upper = any(c.isupper() for c in value)
    has_digit = any(c.isdigit() for c in value)
    if value.isalpha():
        # A letters-only value is an identifier (SecretStr, MySecretName) unless long and random.
        return len(value) >= 16 and has_lower and has_upper and _entropy(value) >= 3.5
    if value.isdigit():
        return False
    if not (has_digit or (has_lower and has_upper)):
        return False
    return _entropy(value) >= 2.8


def _password_shaped(value: str) -> bool:
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


def _b64_decode(value: str, urlsafe: bool = False) -> bytes | None:
    padded = value + "=" * (-len(value) % 4)
    try:
        return base64.urlsafe_b64decode(padded) if urlsafe else base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None


# --------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------

# Specificity used when two findings overlap: the more specific kind wins.
_P_VENDOR = 40  # a vendor token format (ghp_, AKIA, xoxb-, ...)
_P_STRUCTURE = 30  # PEM blocks, JWTs, connection strings, URIs, headers
_P_EMAIL = 20
_P_GENERIC = 10  # keyword = value
_P_ENTROPY = 5  # detect-secrets high-entropy strings

Check = Callable[[re.Match, str], bool]  # (match, full text) -> keep?
KindOf = Callable[[re.Match, str], str]  # (match, full text) -> kind


@dataclass(frozen=True)
class _Rule:
    name: str
    kind: str | KindOf
    pattern: re.Pattern[str]
    triggers: tuple[str, ...]  # lowercase literals; the regex runs only if one occurs in the text
    group: int | str = 0  # the group holding the secret value
    check: Check | None = None
    priority: int = _P_VENDOR
    case_sensitive: bool = False  # triggers are matched against the text as is (AKIA, AIza, SK/AC)
    span: Callable[[re.Match, str], tuple[int, int] | None] | None = None  # when the value is not one group
    # "token": every match is one long run of token characters holding a trigger, so the
    # triggers are looked for in those runs only (a small part of the text); "text": the
    # trigger may sit in the surrounding words (aws_secret_access_key = ..., curl -u ...).
    scope: str = "token"
    # For a rule with no literal to look for: a cheap literal-led regex that every match needs.
    prefilter: re.Pattern[str] | None = None

    def kind_of(self, m: re.Match, text: str) -> str:
        return self.kind if isinstance(self.kind, str) else self.kind(m, text)


def _group_not_fake(group: int | str = 0) -> Check:
    return lambda m, _t: not _is_fake_token(m.group(group))


def _group_not_placeholder(group: int | str = 1) -> Check:
    return lambda m, _t: not _is_placeholder(m.group(group))


_MASKED_AFTER_RE = re.compile(r"[-_.]?(?:#{3}|\*{3}|\.{3}|\u2026|[xX]{4})")

# Boundaries written as lookarounds so a token glued to a longer word does not match.
_L = r"(?<![A-Za-z0-9_])"
_R = r"(?![A-Za-z0-9_])"


def _aws_secret_ok(m: re.Match, _t: str) -> bool:
    v = m.group("v")
    classes = sum((any(c.islower() for c in v), any(c.isupper() for c in v), any(c.isdigit() for c in v)))
    return classes >= 2 and not _HEX_RE.match(v) and _entropy(v) >= 3.5 and not _is_fake_token(v)


def _slack_kind(m: re.Match, _t: str) -> str:
    token = m.group(0).lower()
    if token.startswith("xoxb-"):
        return "slack_bot_token"
    if token.startswith(("xoxp-", "xoxe.xoxp-")):
        return "slack_user_token"
    return "slack_token_other"


def _slack_ok(m: re.Match, _t: str) -> bool:
    token = m.group(0)
    body = token.split("-", 1)[1] if "-" in token else token
    return len(body) >= 15 and any(c.isdigit() for c in body) and not _is_fake_token(body)


def _jwt_ok(m: re.Match, _t: str) -> bool:
    parts = m.group(0).split(".")
    header = _b64_decode(parts[0].rstrip("="), urlsafe=True)
    payload = _b64_decode(parts[1].rstrip("="), urlsafe=True)
    if header is None or payload is None:
        return False
    try:
        decoded = json.loads(header)
    except ValueError:
        return False
    return isinstance(decoded, dict) and payload.lstrip()[:1] == b"{"


def _b64_pem_ok(m: re.Match, _t: str) -> bool:
    payload = re.sub(r"\s+", "", m.group(0))
    head = _b64_decode(payload[: len(payload) - len(payload) % 4][:400])
    return head is not None and b"PRIVATE KEY" in head


_URI_KINDS = {
    "postgres": "postgres_uri", "postgresql": "postgres_uri", "pgsql": "postgres_uri", "postgis": "postgres_uri",
    "mysql": "mysql_uri", "mysqlx": "mysql_uri", "mysql2": "mysql_uri", "mariadb": "mysql_uri",
    "mongodb": "mongodb_uri", "mongodb+srv": "mongodb_uri",
    "redis": "redis_uri", "rediss": "redis_uri",
    "amqp": "amqp_uri", "amqps": "amqp_uri",
    "mssql": "sqlserver_connection_string", "sqlserver": "sqlserver_connection_string",
}


_SCHEME_BEFORE_RE = re.compile(r"(?<![A-Za-z0-9+.\-])(?:jdbc:)?([A-Za-z][A-Za-z0-9+.\-]{1,30})$")


def _uri_kind(m: re.Match, text: str) -> str:
    scheme = _SCHEME_BEFORE_RE.search(text, max(0, m.start() - 40), m.start())
    return _URI_KINDS.get(scheme.group(1).lower(), "basic_auth_url") if scheme else "basic_auth_url"


def _uri_ok(m: re.Match, _t: str) -> bool:
    pw = m.group("pw")
    # "user:password@", "app:${DB_PASSWORD}@", "u:%s@", "u:{password}@" are templates.
    return not (_is_placeholder(pw) or pw.startswith(("$", "%", "{")))


def _basic_header_ok(m: re.Match, _t: str) -> bool:
    value = m.group("v")
    if _is_placeholder(value) or len(value) < 8:
        return False
    decoded = _b64_decode(value)
    if decoded is None:
        return _token_shaped(value)
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        return True
    if ":" in text:
        user, _, pw = text.partition(":")
        return not (_is_placeholder(pw) or (not pw and _is_placeholder(user)))
    return True


def _bearer_ok(m: re.Match, _t: str) -> bool:
    value = m.group("v")
    return not _is_placeholder(value) and _token_shaped(value, min_len=12) and not _is_fake_token(value)


def _split_curl_cred(m: re.Match, _t: str) -> tuple[int, int] | None:
    """The span of the password in ``-u user:pass`` (or of the user when it is a bare token)."""
    raw = m.group("cred")
    start = m.start("cred")
    if raw[:1] in "\"'" and raw[-1:] == raw[:1]:
        raw, start = raw[1:-1], start + 1
    if ":" not in raw or _is_reference(raw):
        return None  # no password (curl prompts for it), or "<user:password>", "$CREDS"
    user, _, pw = raw.partition(":")
    if pw:
        if _is_placeholder(pw) or pw.startswith("$"):
            return None
        return start + len(user) + 1, start + len(raw)
    # "-u sk_live_...:" (an API key as the user name, empty password)
    if user and not _is_placeholder(user) and _token_shaped(user, min_len=16):
        return start, start + len(user)
    return None


def _first_group_span(*names: str) -> Callable[[re.Match, str], tuple[int, int] | None]:
    """The span of the first of ``names`` that took part in the match."""

    def span(m: re.Match, _t: str) -> tuple[int, int] | None:
        for name in names:
            if m.group(name) is not None:
                return m.span(name)
        return None

    return span


# "Not preceded by anything but a separator": a lookbehind rather than "(?:^|[;\s\"'])", so it
# also holds at the start of a search window (``^`` only matches at the start of the string).
_CONN_KEY_RE = re.compile(
    r"(?i)(?<![^;\s\"'])(?:server|data\s?source|initial\s?catalog|database|user\s?id|userid|uid|driver|dsn|host|"
    r"addr(?:ess)?|network\s?address|username|trusted_connection|integrated\s?security)[ \t]*="
)


# How far a rule looks around a match for its context (the rest of a connection string,
# the scheme of a URL, the line for detect-secrets' filters).  A fixed window keeps each
# look-up O(1) in the size of the text: reading the whole line for every match is
# quadratic on a long line with many matches (a minified file, ";Password=x" * 100000).
_CONTEXT = 300


def _line_bounds(text: str, pos: int, window: int = _CONTEXT) -> tuple[int, int]:
    """The line around ``pos``, clipped to ``window`` characters on each side."""
    lo = max(0, pos - window)
    start = text.rfind("\n", lo, pos) + 1 or lo
    end = text.find("\n", pos, pos + window)
    return start, (min(len(text), pos + window) if end < 0 else end)


def _line_of(text: str, pos: int) -> str:
    """The line around ``pos`` (clipped to the context window, see ``_line_bounds``)."""
    start, end = _line_bounds(text, pos)
    return text[start:end]


def _conn_ok(m: re.Match, text: str) -> bool:
    """Password=... inside a ``key=value;`` connection string (not a lone password= line)."""
    v = m.group("v").strip()
    if v[:1] in "\"'{" and len(v) >= 2:
        v = v[1:-1]
    if len(v) < 3:  # before the look-around: ";Password=x" * 100000 stops here
        return False
    start, end = _line_bounds(text, m.start())
    if text.find(";", start, end) < 0 or not _CONN_KEY_RE.search(text, start, end):
        return False
    return not _is_placeholder(v)


def _url_scheme_before(m: re.Match, text: str) -> str | None:
    """The scheme of the URL a ``?password=`` belongs to, or None when it is not in a URL.

    The URL is the run of URL characters that ends at the match (at most ``_CONTEXT`` of
    them); its scheme is the first ``scheme:`` inside that run.  Finding the run first keeps
    this linear: a search for "scheme:, then URL characters up to the match" tried from every
    position of the window costs the square of the window for each match.
    """
    window_start = max(0, m.start() - _CONTEXT)
    through_last_stop = _THROUGH_LAST_STOP_RE.match(text, window_start, m.start())
    run_start = through_last_stop.end() if through_last_stop else window_start
    found = _SCHEME_IN_RUN_RE.search(text, run_start, m.start())
    return found.group(1).lower() if found else None


# Greedy, so one pass to the end of the window and back to its last non-URL character.
_THROUGH_LAST_STOP_RE = re.compile(r"(?s).*[\s\"'`<>]")
_SCHEME_IN_RUN_RE = re.compile(r"(?<![A-Za-z0-9+.\-])([A-Za-z][A-Za-z0-9+]{1,20}):")


def _mailchimp_span(m: re.Match, text: str) -> tuple[int, int] | None:
    start = m.start() - 32
    if start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        return None
    return None if _is_fake_token(text[start : m.start()]) else (start, m.end())


def _conn_kind(m: re.Match, text: str) -> str:
    line = _line_of(text, m.start()).lower()
    if any(k in line for k in ("server=", "data source=", "initial catalog=", "driver=", "trusted_connection")):
        return "sqlserver_connection_string"
    if "host=" in line and ("username=" in line or "port=" in line):
        return "postgres_uri"
    return "connection_string"


_EMAIL_LOCAL_RE = re.compile(r"(?<![A-Za-z0-9._%+\-/])[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}$")


def _email_span(m: re.Match, text: str) -> tuple[int, int] | None:
    if m.group("tld").lower() in _FILE_EXTENSIONS:  # logo@2x.png
        return None
    local = _EMAIL_LOCAL_RE.search(text, max(0, m.start() - 64), m.start())
    if local is None:
        return None
    start = local.start()
    if start > 0 and text[start - 1] == ":" and text[max(0, start - 7) : start].lower() != "mailto:":
        return None  # user:pass@host is a URI credential, handled by the URI rule
    return start, m.end()


_FILE_EXTENSIONS = frozenset(
    "png jpg jpeg gif svg webp avif ico bmp tif tiff js mjs cjs ts tsx jsx css scss sass less json yaml yml "
    "toml html htm txt xml go py rb rs java kt php lock sum mod zip gz tgz tar".split()
)


def _openai_kind(m: re.Match, _t: str) -> str:
    token = m.group(0)
    if token.startswith("sk-or-"):
        return "openrouter_api_key"
    if token.startswith("sk-ant-"):
        return "anthropic_api_key"
    if "T3BlbkFJ" in token or token.startswith(("sk-proj-", "sk-svcacct-", "sk-admin-")):
        return "openai_api_key"
    return "generic_api_key"


def _sk_ok(m: re.Match, _t: str) -> bool:
    token = m.group(0)
    body = token[3:]
    if _is_fake_token(body):
        return False
    if token.startswith(("sk-or-", "sk-ant-", "sk-proj-", "sk-svcacct-", "sk-admin-")) or "T3BlbkFJ" in token:
        return True
    # A bare "sk-" + 32+ characters (DeepSeek, Moonshot, OpenAI legacy): random, not a slug.
    return _token_shaped(body, min_len=32) and _entropy(body) >= 3.5


def _recovery_code_ok(m: re.Match, _t: str) -> bool:
    groups = m.group(0).split("-")
    body = "".join(groups)
    if _is_fake_token(body) or _entropy(body) < 3.0:
        return False
    if body.isdigit():  # BitLocker: eight groups of six digits
        return len(groups) >= 6
    # Letters and digits mixed inside the groups, not words joined by dashes (ABCD-EFGH-...).
    return sum(any(c.isdigit() for c in g) and any(c.isalpha() for c in g) for g in groups) >= 2


# IBAN lengths by country (ISO 13616 registry): a wrong length is not an IBAN.
_IBAN_LENGTHS = {
    "AD": 24, "AE": 23, "AL": 28, "AT": 20, "AZ": 28, "BA": 20, "BE": 16, "BG": 22, "BH": 22, "BR": 29,
    "BY": 28, "CH": 21, "CR": 22, "CY": 28, "CZ": 24, "DE": 22, "DK": 18, "DO": 28, "EE": 20, "EG": 29,
    "ES": 24, "FI": 18, "FO": 18, "FR": 27, "GB": 22, "GE": 22, "GI": 23, "GL": 18, "GR": 27, "GT": 28,
    "HR": 21, "HU": 28, "IE": 22, "IL": 23, "IQ": 23, "IS": 26, "IT": 27, "JO": 30, "KW": 30, "KZ": 20,
    "LB": 28, "LC": 32, "LI": 21, "LT": 20, "LU": 20, "LV": 21, "MC": 27, "MD": 24, "ME": 22, "MK": 19,
    "MR": 27, "MT": 31, "MU": 30, "NL": 18, "NO": 15, "PK": 24, "PL": 28, "PS": 29, "PT": 25, "QA": 29,
    "RO": 24, "RS": 22, "SA": 24, "SC": 31, "SE": 24, "SI": 19, "SK": 24, "SM": 27, "ST": 25, "SV": 28,
    "TL": 23, "TN": 24, "TR": 26, "UA": 29, "VA": 22, "VG": 24, "XK": 20,
}


def _iban_ok(m: re.Match, _t: str) -> bool:
    iban = m.group(0).replace(" ", "")
    if _IBAN_LENGTHS.get(iban[:2]) != len(iban):
        return False
    digits = "".join(str(int(c, 36)) for c in iban[4:] + iban[:4])
    return int(digits) % 97 == 1


def _hf_ok(m: re.Match, _t: str) -> bool:
    body = m.group(0)[3:]
    return not _is_fake_token(body) and _entropy(body) >= 3.5 and not body.islower()


_RULES: tuple[_Rule, ...] = (
    # --- Cloud providers -------------------------------------------------------------
    _Rule(
        "aws_access_key_id", "aws_access_key_id",
        re.compile(rf"{_L}(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{{16}}{_R}"),
        ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
        check=lambda m, _t: not _is_fake_token(m.group(0)[4:]), case_sensitive=True,
    ),
    _Rule(  # aws_secret_access_key = ..., "SecretAccessKey": "...", AWS_SECRET=...
        "aws_secret_access_key", "aws_secret_access_key",
        re.compile(
            r"(?i)(?:aws[\w.\-]{0,30}?(?:secret|sec|private|key)[\w.\-]{0,20}|secret[_.\-]?access[_.\-]?key)"
            r"[\"'`\]]{0,2}[ \t]{0,5}(?::=|=>|[=:,]|[ \t])[ \t]{0,5}[\"'`]?(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])"
        ),
        ("aws", "secretaccesskey", "secret_access_key", "secret-access-key", "secret access key"),
        group="v", check=_aws_secret_ok,
        scope="text",
    ),
    _Rule(  # an access key id followed closely by a 40-character secret (CSV exports, credential files)
        "aws_secret_near_key_id", "aws_secret_access_key",
        re.compile(
            r"(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}[\s\S]{1,300}?"
            r"(?<![A-Za-z0-9/+=_\-])(?P<v>[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=_\-])"
        ),
        ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
        group="v", check=lambda m, t: _aws_secret_ok(m, t) and _entropy(m.group("v")) >= 4.0, case_sensitive=True,
    ),
    _Rule(
        "google_api_key", "google_api_key",
        re.compile(rf"{_L}AIza[0-9A-Za-z_\-]{{35}}(?![A-Za-z0-9_\-])"),
        ("AIza",), check=lambda m, _t: not _is_fake_token(m.group(0)[4:]), case_sensitive=True,
    ),
    _Rule(
        "google_oauth_client_secret", "google_oauth_client_secret",
        re.compile(rf"{_L}GOCSPX-[A-Za-z0-9_\-]{{28}}(?![A-Za-z0-9_\-])"),
        ("gocspx-",), check=_group_not_fake(0),
    ),
    _Rule(
        "google_oauth_access_token", "google_oauth_token",
        re.compile(rf"{_L}ya29\.[0-9A-Za-z_\-]{{30,}}"),
        ("ya29.",), check=_group_not_fake(0),
    ),
    _Rule(  # AccountKey= in Azure Storage / Cosmos DB connection strings
        "azure_storage_account_key", "azure_storage_connection_string",
        re.compile(r"(?i)AccountKey\s*=\s*(?P<v>[A-Za-z0-9+/]{40,100}={0,2})"),
        ("accountkey",), group="v", check=lambda m, _t: not _is_fake_token(m.group("v")),
        scope="text",
    ),
    _Rule(  # Service Bus / Event Hubs / IoT Hub / Relay
        "azure_shared_access_key", "azure_connection_string",
        re.compile(r"(?i)SharedAccessKey\s*=\s*(?P<v>[A-Za-z0-9+/]{30,100}={0,2})"),
        ("sharedaccesskey",), group="v", check=lambda m, _t: not _is_fake_token(m.group("v")),
        scope="text",
    ),
    _Rule(  # SAS token signature in a URL or a SharedAccessSignature= string
        "azure_sas_signature", "azure_sas_token",
        # Bounded "\S{0,300}?": unbounded, every SharedAccessSignature= re-read the rest of the word.
        re.compile(r"(?i)(?:[?&;]|\bSharedAccessSignature=\S{0,300}?[?&;]?)sig=(?P<v>[A-Za-z0-9%+/]{30,}(?:=|%3D){0,2})"),
        ("sig=",), group="v", check=lambda m, _t: not _is_fake_token(m.group("v")),
        scope="text",
    ),
    _Rule(  # App Configuration: Endpoint=https://x.azconfig.io;Id=...;Secret=...
        "azure_app_config", "azure_app_config_connection_string",
        re.compile(r"(?i)Endpoint=https://[^;\s]+;\s*Id=[^;\s]+;\s*Secret=(?P<v>[A-Za-z0-9+/]{20,}={0,2})"),
        ("secret=",), group="v", check=lambda m, _t: not _is_fake_token(m.group("v")),
        scope="text",
    ),
    _Rule(  # Azure AD (Entra) client secret: 3 chars, a digit, "Q~", 31-34 more
        "azure_ad_client_secret", "azure_ad_client_secret",
        re.compile(r"(?<![A-Za-z0-9_~.\-])[A-Za-z0-9_~.]{3}\dQ~[A-Za-z0-9_~.\-]{31,34}(?![A-Za-z0-9_~.\-])"),
        ("q~",), check=lambda m, _t: not _is_fake_token(m.group(0)),
    ),
    # --- Code hosting ---------------------------------------------------------------
    _Rule(
        "github_pat_classic", "github_pat_classic",
        re.compile(rf"{_L}ghp_[A-Za-z0-9]{{36,255}}{_R}"), ("ghp_",),
        check=lambda m, _t: not _is_fake_token(m.group(0)[4:]),
    ),
    _Rule(
        "github_pat_fine_grained", "github_pat_fine_grained",
        re.compile(rf"{_L}github_pat_[A-Za-z0-9_]{{50,255}}{_R}"), ("github_pat_",),
        check=lambda m, _t: not _is_fake_token(m.group(0)[11:]),
    ),
    _Rule(
        "github_token_other", "github_token_other",
        re.compile(rf"{_L}gh[ousr]_[A-Za-z0-9]{{36,255}}{_R}"), ("gho_", "ghu_", "ghs_", "ghr_"),
        check=lambda m, _t: not _is_fake_token(m.group(0)[4:]),
    ),
    _Rule(
        "gitlab_pat", "gitlab_pat",
        re.compile(r"(?<![A-Za-z0-9_\-])glpat-[A-Za-z0-9_\-]{20,}(?:\.[0-9a-z]{2}\.[0-9a-z]{7,9})?(?![A-Za-z0-9_\-])"),
        ("glpat-",), check=lambda m, _t: not _is_fake_token(m.group(0)[6:]),
    ),
    _Rule(
        "gitlab_token_other", "gitlab_token_other",
        re.compile(
            r"(?<![A-Za-z0-9_\-])(?:(?:gldt|glft|glsoat|glrt|glrtr|glcbt|glimt|glptt|glagent|gloas|glffct|glso|glwt)-"
            r"[A-Za-z0-9_\-]{20,}|GR1348941[A-Za-z0-9_\-]{20,})(?![A-Za-z0-9_\-])"
        ),
        ("gldt-", "glft-", "glsoat-", "glrt-", "glrtr-", "glcbt-", "glimt-", "glptt-", "glagent-", "gloas-",
         "glffct-", "glso-", "glwt-", "gr1348941"),
        check=lambda m, _t: not _is_fake_token(m.group(0).split("-", 1)[-1]),
    ),
    # --- Chat -------------------------------------------------------------------------
    _Rule(  # the published formats (bot, user, legacy, config/refresh, app-level)
        "slack_token", _slack_kind,
        re.compile(
            r"(?<![A-Za-z0-9_.\-])(?:"
            r"xoxb-[0-9]{8,14}-[0-9]{8,14}(?:-[A-Za-z0-9]{8,})?"
            r"|xox[pe]-[0-9]{8,14}-[0-9]{8,14}-[0-9]{8,14}-[A-Za-z0-9]{20,40}"
            r"|xox[abeoprs]-(?:[0-9]+-)+[A-Za-z0-9]{8,}"
            r"|xoxe(?:\.xox[bp])?-[0-9]-[A-Za-z0-9]{100,}"
            r"|xapp-[0-9]-[A-Z0-9]+-[0-9]+-[A-Za-z0-9]{16,}"
            r")(?![A-Za-z0-9_\-])"
        ),
        ("xox", "xapp-"), check=_slack_ok,
    ),
    _Rule(
        "slack_webhook", "slack_webhook",
        re.compile(r"(?:https?://)?hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_]{6,}/[A-Za-z0-9_]{6,}(?:/[A-Za-z0-9_]{6,})+"),
        # T.../B... are workspace and channel ids; only the last segment is random.
        ("hooks.slack.com",), check=lambda m, _t: not _is_fake_token(m.group(0).rsplit("/", 1)[-1]),
    ),
    _Rule(
        "telegram_bot_token", "telegram_bot_token",
        re.compile(r"(?<![A-Za-z0-9_])[0-9]{5,16}:AA[0-9A-Za-z_\-]{33}(?![A-Za-z0-9_\-])"),
        # The bot id before the colon is a plain number; only the part after "AA" is random.
        (":aa",), check=lambda m, _t: not _is_fake_token(m.group(0).split(":", 1)[1][2:]),
    ),
    _Rule(
        "discord_webhook", "discord_webhook",
        re.compile(r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_\-]{60,}"),
        ("discord",), check=lambda m, _t: not _is_fake_token(m.group(0).rsplit("/", 1)[-1]),
    ),
    # --- Payments, AI, SaaS -----------------------------------------------------------
    _Rule(
        "stripe_secret_key", "stripe_secret_key",
        re.compile(rf"{_L}(?:sk|rk)_(?:live|test|prod)_[0-9A-Za-z]{{20,247}}{_R}"),
        ("sk_live_", "sk_test_", "sk_prod_", "rk_live_", "rk_test_", "rk_prod_"),
        check=lambda m, _t: not _is_fake_token(m.group(0).split("_", 2)[2]),
    ),
    _Rule(
        "stripe_webhook_secret", "stripe_webhook_secret",
        re.compile(rf"{_L}whsec_[A-Za-z0-9]{{24,}}{_R}"), ("whsec_",),
        check=lambda m, _t: not _is_fake_token(m.group(0)[6:]),
    ),
    _Rule(  # OpenAI (legacy, project, service-account, admin), OpenRouter, Anthropic, other sk- keys
        "sk_api_key", _openai_kind,
        re.compile(
            r"(?<![A-Za-z0-9_\-])sk-(?:or-v1-[0-9a-f]{64}|ant-(?:api|admin|oat)\d{2}-[A-Za-z0-9_\-]{40,}"
            r"|(?:proj|svcacct|admin)-[A-Za-z0-9_\-]{30,}|[A-Za-z0-9_\-]{10,}T3BlbkFJ[A-Za-z0-9_\-]{10,}"
            r"|[A-Za-z0-9]{32,})(?![A-Za-z0-9_\-])"
        ),
        ("sk-",), check=_sk_ok,
    ),
    _Rule(
        "huggingface_token", "huggingface_token",
        re.compile(rf"{_L}(?:hf_|api_org_)[A-Za-z0-9]{{30,40}}{_R}"), ("hf_", "api_org_"), check=_hf_ok,
    ),
    _Rule(
        "npm_token", "npm_token",
        re.compile(rf"{_L}npm_[A-Za-z0-9]{{36}}{_R}"), ("npm_",),
        check=lambda m, _t: not _is_fake_token(m.group(0)[4:]),
    ),
    _Rule(  # .npmrc: //registry.npmjs.org/:_authToken=... or _auth=... / _password=...
        "npmrc_auth", "npm_token",
        # Bounded "//\S{0,300}?:" (a registry URL): unbounded, it re-read the rest of the word per "//".
        re.compile(r"(?im)(?:^|(?<=[\s\"']))(?://\S{0,300}?:)?_(?:authToken|auth|password)\s*=\s*[\"']?(?P<v>[^\s\"']+)"),
        ("_auth", "_password"), group="v", check=_group_not_placeholder("v"),
        scope="text",
    ),
    _Rule(
        "pypi_token", "pypi_token",
        re.compile(rf"{_L}pypi-AgE[A-Za-z0-9_\-]{{50,}}"), ("pypi-age",), check=_group_not_fake(0),
    ),
    _Rule(
        "sendgrid", "sendgrid",
        re.compile(rf"{_L}SG\.[A-Za-z0-9_\-]{{16,32}}\.[A-Za-z0-9_\-]{{16,64}}(?![A-Za-z0-9_\-])"),
        ("sg.",), check=lambda m, _t: not _is_fake_token(m.group(0)[3:]),
    ),
    _Rule(  # API key SID (SK...) and account SID (AC...); both are flagged by gitleaks/noseyparker
        "twilio_sid", "twilio",
        re.compile(rf"{_L}(?:SK|AC)[0-9a-f]{{32}}{_R}"), ("SK", "AC"),
        check=lambda m, _t: not _is_fake_token(m.group(0)[2:]), case_sensitive=True,
    ),
    _Rule(
        "mailchimp_api_key", "mailchimp_api_key",
        # Anchored on the "-usN" data-centre suffix; the 32 hex characters are read before it.
        re.compile(rf"(?<=[0-9a-f]{{32}})-us[0-9]{{1,2}}{_R}"), ("-us",), span=_mailchimp_span,
    ),
    _Rule(
        "mailgun_api_key", "mailgun_api_key",
        re.compile(rf"{_L}key-[0-9a-f]{{32}}{_R}"), ("key-",), check=lambda m, _t: not _is_fake_token(m.group(0)[4:]),
    ),
    _Rule(
        "shopify_token", "shopify_token",
        re.compile(rf"{_L}shp(?:at|ca|pa|ss)_[A-Fa-f0-9]{{32}}{_R}"), ("shpat_", "shpca_", "shppa_", "shpss_"),
        check=lambda m, _t: not _is_fake_token(m.group(0)[6:]),
    ),
    _Rule(
        "digitalocean_token", "digitalocean_token",
        re.compile(rf"{_L}do[opr]_v1_[a-f0-9]{{64}}{_R}"), ("_v1_",),
        check=lambda m, _t: not _is_fake_token(m.group(0)[7:]),
    ),
    _Rule(  # 2FA recovery codes, BitLocker recovery keys, licence keys: HQ4C-8FW2-... (4+ dash groups)
        "recovery_code", "recovery_code",
        re.compile(r"(?<![\w\-])[A-Z0-9]{4,8}(?:-[A-Z0-9]{4,8}){3,9}(?![\w\-])"),
        (), check=_recovery_code_ok, prefilter=re.compile(r"-[A-Z0-9]{4,8}-[A-Z0-9]{4,8}-"),
    ),
    _Rule(  # IBAN (written as one word or in groups of four), checked with its mod-97 checksum
        "iban", "iban",
        re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?(?![A-Za-z0-9])"),
        # Only where the text says "IBAN": an unlabelled account number is rare in notes, and the
        # label keeps this rule from scanning every text for capital letters.
        ("iban",), check=_iban_ok, priority=_P_STRUCTURE, scope="text",
    ),
    _Rule(  # assorted SaaS tokens with distinctive prefixes
        "saas_token", "api_token",
        re.compile(
            r"(?<![A-Za-z0-9_\-])(?:lin_api_[A-Za-z0-9]{40}|PMAK-[a-f0-9]{24}-[a-f0-9]{34}|dapi[a-f0-9]{32}"
            r"|AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}|hvs\.[A-Za-z0-9_\-]{90,}"
            r"|glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8}|pul-[a-f0-9]{40}|r8_[A-Za-z0-9]{37}|gsk_[A-Za-z0-9]{52}"
            r"|pplx-[A-Za-z0-9]{48}|xai-[A-Za-z0-9]{80}|figd_[A-Za-z0-9_\-]{40}|sbp_[a-f0-9]{40}"
            r"|dp\.pt\.[A-Za-z0-9]{43}|sq0(?:atp|csp)-[A-Za-z0-9_\-]{22,43}|ATATT3[A-Za-z0-9_\-=]{150,}"
            r"|ntn_[0-9]{11}[A-Za-z0-9]{35}|sntrys_[A-Za-z0-9+/=]{60,}|[a-z0-9]{14}\.atlasv1\.[A-Za-z0-9_=\-]{60,70})"
            r"(?![A-Za-z0-9_\-])"
        ),
        ("lin_api_", "pmak-", "dapi", "age-secret-key-", "hvs.", "glsa_", "pul-", "r8_", "gsk_", "pplx-", "xai-",
         "figd_", "sbp_", "dp.pt.", "sq0", "atatt3", "ntn_", "sntrys_", ".atlasv1."),
        check=_group_not_fake(0),
    ),
    # --- Keys and tokens with structure -----------------------------------------------
    _Rule(  # the payload of a base64-encoded PEM private key (Kubernetes secrets, CI variables)
        "private_key_base64", "private_key",
        re.compile(r"LS0tLS1CRUdJTi[A-Za-z0-9+/]{40,}(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/]{8,})*={0,2}"),
        ("ls0tls1crudjti",), check=_b64_pem_ok, priority=_P_STRUCTURE,
    ),
    _Rule(
        "jwt", "jwt",
        re.compile(r"(?<![A-Za-z0-9_\-])ey[A-Za-z0-9_\-]{15,}={0,2}\.ey[A-Za-z0-9_\-]{15,}={0,2}\.(?:[A-Za-z0-9_\-+/]{10,}={0,2})?"),
        ("eyj",), check=_jwt_ok, priority=_P_STRUCTURE,
    ),
    _Rule(  # scheme://user:password@host (databases keep their own kind, the rest is basic_auth_url)
        "uri_credentials", _uri_kind,
        # Starts with the literal "://" so the regex engine can jump between candidates;
        # the scheme before it is read by _uri_kind.
        re.compile(r"://(?P<user>[^\s:@/'\"`<>()\[\]{}]{1,128}):(?P<pw>[^\s@/'\"`<>]{1,256})@(?=[A-Za-z0-9\[\]._\-])"),
        ("://",), group="pw", check=_uri_ok, priority=_P_STRUCTURE, scope="text",
    ),
    _Rule(  # jdbc:...;password=... and ?password=... in URLs (the scheme is read before the match)
        "url_query_password", lambda m, t: _URI_KINDS.get(_url_scheme_before(m, t) or "", "basic_auth_url"),
        re.compile(r"(?i)[?&;](?:password|pwd|passwd)=(?P<v>[^&;\s\"'`<>#]+)"),
        ("passw", "pwd"), group="v", priority=_P_STRUCTURE, scope="text",
        check=lambda m, t: _url_scheme_before(m, t) is not None and not _is_placeholder(m.group("v")),
    ),
    _Rule(  # ADO.NET / ODBC / Npgsql: Server=...;User Id=...;Password=...;  (either order)
        "connection_string_password", _conn_kind,
        # Anchored on "Password=" / "Pwd="; the line must read as a connection string (_conn_ok).
        re.compile(
            r"(?i)(?<![\w])(?:password|pwd)[ \t]*=[ \t]*"
            # Quoted values are bounded: an unclosed quote made every match scan the rest of the line.
            r"(?P<v>\"[^\"\n]{0,256}\"|'[^'\n]{0,256}'|\{[^}\n]{0,256}\}|[^;\s\"'][^;\n\"']*)"
        ),
        ("passw", "pwd"), group="v", check=_conn_ok, priority=_P_STRUCTURE, scope="text",
    ),
    _Rule(
        "basic_auth_header", "basic_auth_header",
        re.compile(r"(?i)\b(?:authorization|proxy-authorization)[\"']?\s*[:=]\s*[\"']?basic\s+(?P<v>[A-Za-z0-9+/]{4,}={0,2})"),
        ("basic",), group="v", check=_basic_header_ok, priority=_P_STRUCTURE,
        scope="text",
    ),
    _Rule(
        "bearer_token", "bearer_token",
        re.compile(r"(?i)\b(?:bearer|token)\s+(?P<v>[A-Za-z0-9._~+/\-]{12,}={0,2})(?![A-Za-z0-9._~+/=\-])"),
        ("bearer", "token"), group="v", check=_bearer_ok, priority=_P_STRUCTURE,
        scope="text",
    ),
    _Rule(
        "basic_auth_curl", "basic_auth_curl",
        re.compile(
            r"\bcurl\b(?:[^\n]|\\\r?\n){0,500}?\s(?:-u|--user)(?:[ \t]+|=)"
            r"(?P<cred>\"[^\"\n]+\"|'[^'\n]+'|[^\s\"']+)"
        ),
        ("curl",), span=_split_curl_cred, priority=_P_STRUCTURE,
        scope="text",
    ),
    _Rule(  # SQL: CREATE USER ... IDENTIFIED BY 'x'
        "sql_identified_by", "generic_password",
        re.compile(r"(?i)\bidentified\s+(?:with\s+\w+\s+)?by\s+(?:password\s+)?(?P<q>['\"])(?P<v>[^'\"\n]{3,128})(?P=q)"),
        ("identified",), group="v", check=_group_not_placeholder("v"), priority=_P_GENERIC,
        scope="text",
    ),
    _Rule(  # .netrc: machine host login user password secret
        "netrc_password", "generic_password",
        re.compile(r"(?i)\blogin\s+\S+\s+password\s+(?P<v>[^\s]+)"),
        ("login",), group="v", check=_group_not_placeholder("v"), priority=_P_GENERIC,
        scope="text",
    ),
    _Rule(  # mysql -u root -pS3cret / sshpass -p 'x'
        "cli_password_flag", "generic_password",
        # The flag within 500 characters of the command (as curl's -u): an unbounded "[^\n]*?"
        # re-read the rest of the line from every "mysql" on it.
        re.compile(r"(?:\b(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\n]{0,500}?\s-p(?P<v>[^\s\"'-][^\s]*)|\bsshpass\s+-p\s*(?P<v2>[^\s]+))"),
        ("mysql", "mariadb", "sshpass"), span=_first_group_span("v", "v2"),
        check=lambda m, _t: not _is_placeholder(m.group("v") if m.group("v") is not None else m.group("v2")),
        priority=_P_GENERIC,
        scope="text",
    ),
    _Rule(  # new NetworkCredential("user", "pass"), UsernamePasswordCredentials("user", "pass")
        "credential_constructor", "generic_password",
        re.compile(
            r"\b\w*(?:Credentials?|PasswordAuthentication|BasicAuth\w*)\(\s*[\"'][^\"'\n]{1,128}[\"']\s*,\s*"
            r"[\"'](?P<v>[^\"'\n]{3,128})[\"']"
        ),
        ("credential", "passwordauth", "basicauth"), group="v", check=_group_not_placeholder("v"),
        priority=_P_GENERIC,
        scope="text",
    ),
    _Rule(  # <password>x</password>, <add key="DbPassword" value="x"/>
        "xml_secret", lambda m, _t: _xml_kind(m) or "generic_secret",
        re.compile(r"<(?P<tag>[A-Za-z_][\w:.\-]{2,60})>(?P<v>[^<\s][^<\n]{0,200})</(?P=tag)>"),
        ("password>", "passwd>", "pwd>", "secret>", "token>", "key>", "secrets>", "tokens>"), group="v",
        check=lambda m, _t: _xml_ok(m), priority=_P_GENERIC, scope="text",
    ),
    _Rule(
        "email", "email",
        # Anchored on "@" (a literal the engine can jump to); the local part is read backwards.
        re.compile(
            r"@(?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,62}[A-Za-z0-9])?\.)+(?P<tld>[A-Za-z]{2,24})"
            r"(?![A-Za-z0-9_\-]|\.[A-Za-z0-9]|:[\w~/.])"
        ),
        ("@",), span=_email_span, priority=_P_EMAIL, scope="text",
    ),
)


_PEM_BEGIN_RE = re.compile(r"-----BEGIN[ A-Z0-9_\-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
_PEM_END_RE = re.compile(r"-----END[ A-Z0-9_\-]{0,100}PRIVATE KEY(?: BLOCK)?-----")
# Lines after a BEGIN header with no END: one base64 token (or a "Proc-Type: ..." header) per line.
# Also read as code: "-----BEGIN ...-----" +\n "MIIE..." +\n ... and "...\\n..." in one JSON string.
_PEM_BODY_RE = re.compile(
    r"(?:[ \t]*[\"']?[ \t]*[+,]?[ \t]*(?:\\n|\r?\n)[ \t]*\+?[ \t]*[\"']?"
    r"(?:[A-Za-z\-]+:[^\n\\\"']*|[A-Za-z0-9+/=]{4,})(?:\\n)?[\"']?)*"
)
_PEM_LINE_STRIP_RE = re.compile(r"^[\s\"'+,]+|[\s\"'+,;]+$")
_B64_LINE_RE = re.compile(r"^[A-Za-z0-9+/=]+$")
_PUTTY_RE = re.compile(
    # Header lines are short; unbounded "[^\n]*" re-read a long line from every header on it.
    r"PuTTY-User-Key-File-\d+:[^\n]{0,300}\n(?:[^\n]{0,300}\n){0,12}?Private-Lines:\s*\d+\s*\n(?P<body>(?:[A-Za-z0-9+/=]+\r?\n?)+)"
)


def _pem_rule_spans(text: str, low: str) -> Iterable[tuple[int, int]]:
    """Private-key blocks: from the BEGIN line to the END line (or the end of the base64 lines)."""
    if "private key" not in low and "putty-user-key-file" not in low:
        return
    begins = list(_PEM_BEGIN_RE.finditer(text))
    next_begins = [b.start() for b in begins[1:]] + [len(text)]
    for m, next_begin in zip(begins, next_begins):  # noqa: B905 - one more end than begins when none
        # A block ends before the next BEGIN: searching 20000 characters past every header
        # for an END (and reading all of them as its body) was quadratic on many headers.
        end_m = _PEM_END_RE.search(text, m.end(), min(next_begin, m.end() + 20000))
        if end_m:
            body, end = text[m.end() : end_m.start()], end_m.end()
        else:  # the block was cut (chunk boundary, truncated paste): take the base64-ish lines
            tail = _PEM_BODY_RE.match(text, m.end())
            body, end = tail.group(0), tail.end()
        if _pem_body_ok(body):
            yield m.start(), end
    for m in _PUTTY_RE.finditer(text):
        if _pem_body_ok(m.group("body")):
            yield m.start(), m.end()


def _pem_body_ok(body: str) -> bool:
    """Real-looking base64 after the header (not "xxxx", "****", "..." or nothing at all)."""
    payload = "".join(
        line
        for line in (_PEM_LINE_STRIP_RE.sub("", raw) for raw in re.split(r"\\n|\r?\n", body))
        if _B64_LINE_RE.match(line)  # prose ("super secret key here") and "Proc-Type:" lines are not payload
    )
    # 24+ characters: a block cut by a chunk boundary may keep a single line of its key.
    # Not _is_fake_token: DER encodes runs of zero bytes, so real keys hold "AAAAAAAA".
    if len(payload) < 24 or len(set(payload)) < 12 or _longest_run(payload) > len(payload) // 3:
        return False
    return not any(s in body for s in ("...", "\u2026", "****"))


# --------------------------------------------------------------------------------------
# Generic keyword = value scanner
# --------------------------------------------------------------------------------------

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
_KEYWORDS = ("pass", "pw", "psw", "secret", "token", "key", "cred", "contrase", "senha", "pin")


def _keyword_hits(low: str) -> list[tuple[int, int]]:
    """Where the keywords occur: one str.find loop each beats one regex alternation."""
    hits = []
    for kw in _KEYWORDS:
        i = low.find(kw)
        while i >= 0:
            hits.append((i, i + len(kw)))
            i = low.find(kw, i + 1)
    return hits


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
        [ \t]{0,4}(?P<op>:=|=>|==|!=|=|:|->|,)
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


def _ident_parts(ident: str) -> list[str]:
    return [p.lower() for p in _CAMEL_SPLIT_RE.split(ident) if p]


def _classify_ident(parts: list[str]) -> str | None:
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


def _generic_spans(text: str, low: str) -> Iterable[tuple[int, int, str]]:
    """``password = hunter2``-style findings: (start, end, kind) of each value."""
    seen_idents: set[int] = set()
    kinds: dict[str, tuple[str | None, list[str]]] = {}  # per call: identifiers repeat within a text
    for hit_start, hit_end in _keyword_hits(low):
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
        end = _IDENT_CHAR_RE.match(text, hit_end).end()
        if end - start > _MAX_IDENT + hit_end - hit_start or _IDENT_CHAR_RE.match(text, end).end() != end:
            continue
        if start > 0 and text[start - 1] in "/\\":
            continue  # /etc/mosquitto/passwd is a path, not a key
        ident = text[start:end].strip(".-")
        cached = kinds.get(ident)
        if cached is None:
            parts = _ident_parts(ident)
            cached = kinds[ident] = (_classify_ident(parts), parts)
        kind, parts = cached
        if parts in (["key"], ["keys"]):  # "API key: ...", "secret key is ...": the word before decides
            prev = _PREV_WORD_RE.search(text, max(0, start - 24), start)
            if prev is not None:
                kind = _classify_ident([prev.group(1).lower(), *parts])
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
        if _generic_value_ok(value, quoted, op, kind, parts):
            looks_aws = len(value) == 40 and ("aws" in parts or "access" in parts)
            if kind != "generic_password" and looks_aws and _aws_secret_ok(_FakeMatch(value), text):
                kind = "aws_secret_access_key"
            yield v_start, v_end, "generic_api_key" if kind == _WEAK_KEY else kind


def _xml_kind(m: re.Match) -> str | None:
    """The generic kind for a tag name (UserSecretsId is an id, DbPassword a password)."""
    return _classify_ident(_ident_parts(m.group("tag").rsplit(":", 1)[-1]))


def _xml_ok(m: re.Match) -> bool:
    kind = _xml_kind(m)
    if kind is None:
        return False
    tag = m.group("tag").rsplit(":", 1)[-1]
    return _generic_value_ok(m.group("v").strip(), True, "=", kind, _ident_parts(tag))


def _strip_trailing_punctuation(value: str, chars: str) -> str:
    """Drop ``chars`` from the end of a bare value, keeping closers that close something."""
    while value and value[-1] in chars:
        closer = value[-1]
        opener = {")": "(", "]": "[", "}": "{"}.get(closer)
        if opener and value.count(opener) >= value.count(closer):
            break
        value = value[:-1]
    return value


@dataclass(frozen=True)
class _FakeMatch:
    """Just enough of re.Match for the value checks that take a match."""

    value: str

    def group(self, _name: int | str = 0) -> str:
        return self.value


_WEAK_KEY_VALUE_RE = re.compile(r"^[A-Za-z0-9+/=_\-]+$")
_DIGIT_RE = re.compile(r"[0-9]")
_VERSION_RE = re.compile(r"^[v=^~<>]*\d+(?:\.[\dx*]+)+(?:[-+][\w.]+)?$")


# The shortest value each family accepts (see the branches of _generic_value_ok).
_MIN_VALUE_LENGTH = {"generic_password": 4, _WEAK_KEY: 20}
_MIN_TOKEN_LENGTH = 8  # the other families: _token_shaped(v, min_len=8)


def _weak_key_shaped(v: str) -> bool:
    """Upper, lower and digits in key characters only (no words), before the costlier checks."""
    # ASCII once _WEAK_KEY_VALUE_RE matched, so the case tests can be C-level comparisons.
    return (
        _WEAK_KEY_VALUE_RE.match(v) is not None
        and v.lower() != v  # an upper-case letter
        and v.upper() != v  # a lower-case letter
        and _DIGIT_RE.search(v) is not None
    )


def _generic_value_ok(value: str, quoted: bool, op: str, kind: str, parts: list[str]) -> bool:
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
    if _is_placeholder(v) or v.startswith(("$", "%")) or _PATH_RE.match(v) or _URL_RE.match(v):
        return False
    if _DIGEST_PREFIX_RE.match(v) or v.startswith(_PUBKEY_PREFIX):
        return False
    if _VERSION_RE.match(v):
        return False  # pin: 1.2.3
    if _TYPE_HINT_RE.match(v) and (v[:1].isupper() or not quoted):
        return False  # password: str, token: Optional[str], api_key: SecretStr
    if kind == "generic_password":
        if len(v) < 4:
            return False
        if op == "ws":
            # "with the password 8LzM...", "--password X": a bare password word, then a value
            # that has letters and digits (not "zigbee2mqtt"-after-a-path, see _generic_spans).
            if len(parts) != 1 or not (parts[0] in _PASSWORD_PARTS or parts[0].endswith(_PASSWORD_SUFFIXES)):
                return False
            return quoted or (_password_shaped(v) and v[0].isalnum() and any(c.isdigit() for c in v))
        if op == "prose":
            if v.isdigit() and parts[-1] == "pin":
                return len(v) >= 4
            return quoted or _password_shaped(v)
        if quoted:
            return len(v) <= 128
        if v.isdigit():
            return len(v) >= (4 if parts[-1] == "pin" else 6)  # a PIN is short; other digits-only are ids
        if v.isalpha() and not v.islower() and not v.isupper() and v[0].isupper() and not _password_shaped(v):
            return False  # "password: SecretStr"-like class names
        return True
    if kind == _WEAK_KEY:  # random-looking (length and _weak_key_shaped checked above), high entropy
        return (
            _entropy(v) >= 3.7
            and not _is_fake_token(v)
        )
    # token / secret / api key: must look generated, whatever the syntax
    if op in ("prose", "ws") and not quoted and not _token_shaped(v, min_len=12):
        return False
    return _token_shaped(v, min_len=8) and not _is_fake_token(v)


# --------------------------------------------------------------------------------------
# detect-secrets adapter
# --------------------------------------------------------------------------------------

# detect-secrets plugins whose token families the own rules do not cover (see the module docstring).
DEFAULT_DS_PLUGINS: tuple[str, ...] = ("ArtifactoryDetector", "DiscordBotTokenDetector")

_DS_KINDS: dict[str, str] = {
    "Artifactory Credentials": "artifactory_token",
    "Azure Storage Account access key": "azure_storage_connection_string",
    "Basic Auth Credentials": "basic_auth_url",
    "Cloudant Credentials": "cloudant_credentials",
    "Discord Bot Token": "discord_bot_token",
    "IBM Cloud IAM Key": "ibm_cloud_iam_key",
    "IBM COS HMAC Credentials": "ibm_cos_hmac",
    "JSON Web Token": "jwt",
    "Mailchimp Access Key": "mailchimp_api_key",
    "NPM tokens": "npm_token",
    "OpenAI Token": "openai_api_key",
    "Private Key": "private_key",
    "PyPI Token": "pypi_token",
    "SendGrid API Key": "sendgrid",
    "SoftLayer Credentials": "softlayer_credentials",
    "Square OAuth Secret": "square_oauth_secret",
    "Stripe Access Key": "stripe_secret_key",
    "Telegram Bot Token": "telegram_bot_token",
    "Twilio API Key": "twilio",
    "Base64 High Entropy String": "high_entropy_string",
    "Hex High Entropy String": "high_entropy_string",
}
_DS_EDGE = " \t\r\n\"'=:"
_DS_SKIP = frozenset({"IPPublicDetector"})  # an IP address is not a secret (the identity map handles hosts)

# Literal-led searches that every match of a plugin needs: Python's regex engine jumps to a
# leading literal quickly, while the plugins' own patterns (leading alternations) are tried at
# every position.  Skipping a plugin when its literal is absent changes no result.
_DS_PREFILTERS: dict[str, re.Pattern[str]] = {
    "ArtifactoryDetector": re.compile(r"A(?:KC|P[\dABCDEF])"),
    "DiscordBotTokenDetector": re.compile(r"\.[a-zA-Z\d_-]{6}\."),
    "MailchimpDetector": re.compile(r"-us[0-9]"),
    "TelegramBotTokenDetector": re.compile(r":[0-9A-Za-z_-]{35}"),
}


def _ds_kind(secret_type: str, value: str) -> str:
    if secret_type == "AWS Access Key":
        is_key_id = re.match(r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)", value)
        return "aws_access_key_id" if is_key_id else "aws_secret_access_key"
    if secret_type == "GitHub Token":
        return "github_pat_classic" if value.startswith("ghp_") else "github_token_other"
    if secret_type == "GitLab Token":
        return "gitlab_pat" if value.startswith("glpat-") else "gitlab_token_other"
    if secret_type == "Slack Token":
        if "hooks.slack.com" in value:
            return "slack_webhook"
        return {"xoxb": "slack_bot_token", "xoxp": "slack_user_token"}.get(value[:4].lower(), "slack_token_other")
    if secret_type == "Secret Keyword":
        return "generic_secret"
    return _DS_KINDS.get(secret_type, re.sub(r"\W+", "_", secret_type.lower()).strip("_"))


class _DetectSecretsAdapter:
    """detect-secrets plugins run over a whole text, with offsets and the library's own filters."""

    def __init__(self, plugin_names: Sequence[str] | str, guard: bool) -> None:
        # Imported here so that the module works (own rules only) without the library.
        from detect_secrets.core.plugins.util import (
            get_mapping_from_secret_type_to_class,
        )
        from detect_secrets.filters import heuristic
        from detect_secrets.plugins import keyword as ds_keyword
        from detect_secrets.plugins.base import RegexBasedDetector
        from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
        from detect_secrets.plugins.keyword import KeywordDetector

        classes = {cls.__name__: cls for cls in get_mapping_from_secret_type_to_class().values()}
        names = [n for n in classes if n not in _DS_SKIP] if plugin_names == "all" else list(plugin_names)
        unknown = [n for n in names if n not in classes]
        if unknown:
            raise ValueError(f"unknown detect-secrets plugins: {unknown}; known: {sorted(classes)}")
        self.plugins = [classes[n]() for n in names]
        self.guard = guard  # combined mode: findings must also pass the own placeholder checks
        self._heuristic = heuristic
        self._regex_base = RegexBasedDetector
        self._entropy_base = HighEntropyStringsPlugin
        self._keyword_cls = KeywordDetector
        # Markdown is "other" to detect-secrets, which then requires quoted values (QUOTES_REQUIRED).
        self._keyword_regexes = tuple(ds_keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP.items())
        self._keyword_prefilter = re.compile("|".join(ds_keyword.DENYLIST), re.I)

    def spans(self, text: str) -> Iterable[tuple[int, int, str, str, int]]:
        for plugin in self.plugins:
            name = type(plugin).__name__
            if isinstance(plugin, self._keyword_cls):
                yield from self._keyword_spans(plugin, text)
            elif isinstance(plugin, self._entropy_base):
                for m in plugin.regex.finditer(text):
                    value = m.group(2)
                    if plugin.calculate_shannon_entropy(value) <= plugin.entropy_limit:
                        continue
                    if self.guard and _looks_like_digest(text, m.start(2), value):
                        continue
                    if self._keep(plugin, value, text, m.start(2)):
                        yield m.start(2), m.end(2), "high_entropy_string", f"detect-secrets:{name}", _P_ENTROPY
            elif isinstance(plugin, self._regex_base):
                prefilter = _DS_PREFILTERS.get(name)
                if prefilter is not None and not prefilter.search(text):
                    continue  # a literal every match of the plugin needs is absent
                for regex in plugin.denylist:
                    for m in regex.finditer(text):
                        for start, end in self._match_spans(m):
                            # Some patterns match their delimiters too (Artifactory: '(?:\s|=|:|"|^)AKC...').
                            while start < end and text[start] in _DS_EDGE:
                                start += 1
                            while end > start and text[end - 1] in _DS_EDGE:
                                end -= 1
                            value = text[start:end]
                            if name == "JwtTokenDetector" and not plugin.is_formally_valid(value):
                                continue
                            if name == "PrivateKeyDetector":
                                start, end = _expand_pem(text, start, end)
                                if self.guard and not _pem_body_ok(text[m.end() : end]):
                                    continue
                            if self.guard and _MASKED_AFTER_RE.match(text, end):
                                continue
                            if self._keep(plugin, value, text, start):
                                kind = _ds_kind(plugin.secret_type, value)
                                yield start, end, kind, f"detect-secrets:{name}", _P_VENDOR

    @staticmethod
    def _match_spans(m: re.Match) -> list[tuple[int, int]]:
        # As RegexBasedDetector.analyze_string: every non-empty group, or the whole match.  One
        # exception: a group that only captures a prefix (GitHub's "(ghp|gho|...)_...", GitLab's
        # "(glpat|...)-...") would redact "ghp" and leave the token, so the whole match is used.
        if m.re.groups:
            spans = [m.span(i) for i in range(1, m.re.groups + 1) if m.group(i)]
            if all(end - start < 8 and start == m.start() for start, end in spans):
                return [m.span()]
            return spans
        return [m.span()]

    def _keyword_spans(self, plugin: Any, text: str) -> Iterable[tuple[int, int, str, str, int]]:
        line_end = -1
        for hit in self._keyword_prefilter.finditer(text):
            # Hits come in text order: one still before the end of the last line read is on
            # that line (looking for its start again from every hit was quadratic).
            if hit.start() <= line_end:
                continue
            line_start = text.rfind("\n", 0, hit.start()) + 1
            line_end = text.find("\n", hit.start())
            line_end = len(text) if line_end < 0 else line_end
            line = text[line_start:line_end]
            for regex, group in self._keyword_regexes:
                for m in regex.finditer(line):
                    start, end = m.span(group)
                    value = m.group(group)
                    if value and self._keep(plugin, value, text, line_start + start):
                        is_password = re.search(r"pass|pwd|contrase", m.group(0), re.I)
                        kind = "generic_password" if is_password else "generic_secret"
                        yield line_start + start, line_start + end, kind, "detect-secrets:KeywordDetector", _P_GENERIC

    def _keep(self, plugin: Any, value: str, text: str, pos: int) -> bool:
        """detect-secrets' default heuristic filters (plus the own placeholder checks when guarded)."""
        h = self._heuristic
        # The library reads the whole line for each finding; that is quadratic on a long line
        # with many findings, so the line is clipped to the context window (the id filter
        # looks just before the value; the indirect-reference filter needs the exact line,
        # and only when it is at most 1000 characters long, see _is_indirect_reference).
        is_regex_plugin = isinstance(plugin, self._regex_base)
        if (
            h.is_sequential_string(value)
            or h.is_potential_uuid(value)
            # Always False for a regex-based plugin (it only reads the line to find the value).
            or (not is_regex_plugin and h.is_likely_id_string(value, _line_of(text, pos), plugin))
            or h.is_templated_secret(value)
            or h.is_prefixed_with_dollar_sign(value)
            or _is_indirect_reference(_short_line_at(text, pos))
            or h.is_not_alphanumeric_string(value)
        ):
            return False
        if self.guard:
            if _is_fake_token(value):
                return False
            if isinstance(plugin, self._regex_base):
                # A vendor format matched: only stand-in markers count (a Discord token reads
                # like a dotted attribute path, which _is_placeholder takes for a reference).
                low = value.lower()
                return not any(marker in low for marker in _PLACEHOLDER_SUBSTRINGS)
            return not _is_placeholder(value)
        return True


# detect-secrets' is_indirect_reference ("secret = get_secret_key()", "x = headers['apikey']")
# skips lines longer than this; so does _is_indirect_reference.
_INDIRECT_MAX_LINE = 1000
# Its regex, ([^\v=!:]*)\s*(:=?|[!=]{1,3})\s*([\w.-]+[\[\(][^\v]*[\]\)]), is tried from every
# position of the line and costs up to the square of the line for each finding.  Its first
# group may be empty, so it matches exactly when an operator, optional spaces and a name are
# followed by an opening bracket and, later on the line with no vertical tab in between, by a
# closing one: the two regexes below find that in one pass.
_INDIRECT_HEAD_RE = re.compile(r"(?::=?|[!=]{1,3})\s*[\w.-]+[\[\(]")
_INDIRECT_CLOSER_RE = re.compile(r"[\]\)]")


def _short_line_at(text: str, pos: int) -> str | None:
    """The whole line around ``pos`` if it has at most ``_INDIRECT_MAX_LINE`` characters, else None."""
    start, end = _line_bounds(text, pos, _INDIRECT_MAX_LINE + 1)
    return text[start:end] if end - start <= _INDIRECT_MAX_LINE else None


def _is_indirect_reference(line: str | None) -> bool:
    """detect-secrets' ``is_indirect_reference(line)``, in time linear in the line."""
    if line is None or len(line) > _INDIRECT_MAX_LINE:
        return False
    heads = _INDIRECT_HEAD_RE.finditer(line)
    if "\v" not in line:  # the usual case: any closing bracket after the first head will do
        first = next(heads, None)
        return first is not None and _INDIRECT_CLOSER_RE.search(line, first.end()) is not None
    for head in heads:
        closer = _INDIRECT_CLOSER_RE.search(line, head.end())
        if closer is None:
            return False  # none after this head, so none after any later one either
        if "\v" not in line[head.end() : closer.start()]:
            return True
    return False


_DIGEST_BEFORE_RE = re.compile(r"(?i)(?:sha\d+|sha3-\d+|md5|blake2b?)[-:]$")


def _looks_like_digest(text: str, start: int, value: str) -> bool:
    """A hash, not a secret: "sha384-..." (SRI), "sha256:..." or a bare hex digest."""
    if _DIGEST_PREFIX_RE.match(value) or _DIGEST_BEFORE_RE.search(text, max(0, start - 12), start):
        return True
    return len(value) in (32, 40, 56, 64, 96, 128) and _HEX_RE.match(value) is not None


def _expand_pem(text: str, start: int, end: int) -> tuple[int, int]:
    """detect-secrets reports only "BEGIN ... PRIVATE KEY": redact the whole block."""
    begin = start - 5 if text.startswith("-----", start - 5) else start
    header_end = end + 5 if text.startswith("-----", end) else end
    end_m = _PEM_END_RE.search(text, header_end, header_end + 20000)
    if end_m:
        return begin, end_m.end()
    return begin, _PEM_BODY_RE.match(text, header_end).end()


# --------------------------------------------------------------------------------------
# The detector
# --------------------------------------------------------------------------------------


class SecretDetector:
    """Finds secrets in text; build once, call :meth:`find`/:meth:`redact` many times.

    ``use_detect_secrets`` adds detect-secrets plugins (``ds_plugins``: the default
    subset, ``"all"``, or a list of plugin class names).  ``use_own_rules=False``
    runs detect-secrets alone (for the benchmark).
    """

    def __init__(
        self,
        use_detect_secrets: bool = True,
        *,
        use_own_rules: bool = True,
        ds_plugins: Sequence[str] | str | None = None,
    ) -> None:
        self.use_own_rules = use_own_rules
        self._ds: _DetectSecretsAdapter | None = None
        if use_detect_secrets:
            plugins = DEFAULT_DS_PLUGINS if ds_plugins is None else ds_plugins
            # Alone, detect-secrets is measured as it is; next to the own rules its findings
            # go through the same placeholder checks.
            self._ds = _DetectSecretsAdapter(plugins, guard=use_own_rules)

    def find(self, text: str) -> list[SecretFinding]:
        """Sorted, non-overlapping findings; overlapping ones merge and keep the more specific kind."""
        if not text:
            return []
        raw: list[tuple[int, int, str, str, int]] = []  # start, end, kind, rule, priority
        if self.use_own_rules:
            low = _lower_same_length(text)
            runs = "\n".join(_TOKEN_RUN_RE.findall(text))
            haystacks = {
                ("token", True): runs,
                ("token", False): runs.lower(),
                ("text", True): text,
                ("text", False): low,
            }
            active: set[int] = {i for i, r in _PREFILTERED if r.prefilter.search(text)}
            for key, triggers in _TRIGGERS.items():
                haystack = haystacks[key]
                for trigger, rule_ids in triggers:
                    if trigger in haystack:
                        active.update(rule_ids)
            for rule_id in sorted(active):
                rule = _RULES[rule_id]
                for m in rule.pattern.finditer(text):
                    if rule.check is not None and not rule.check(m, text):
                        continue
                    span = rule.span(m, text) if rule.span is not None else m.span(rule.group)
                    if span is None:
                        continue
                    start, end = span
                    if rule.priority == _P_VENDOR and _MASKED_AFTER_RE.match(text, end):
                        continue  # "xoxp-1234-...####": a masked or truncated token in docs
                    if end > start:
                        raw.append((start, end, rule.kind_of(m, text), f"rule:{rule.name}", rule.priority))
            for start, end in _pem_rule_spans(text, low):
                raw.append((start, end, "private_key", "rule:private_key", _P_STRUCTURE + 5))
            for start, end, kind in _generic_spans(text, low):
                raw.append((start, end, kind, "rule:generic_assignment", _P_GENERIC))
        if self._ds is not None:
            raw.extend(self._ds.spans(text))
        return _merge(raw)

    def redact(self, text: str) -> Redaction:
        """``text`` with every finding replaced by ``[REDACTED:<kind>]``."""
        findings = self.find(text)
        if not findings:
            return Redaction(text, {})
        out: list[str] = []
        pos = 0
        for f in findings:
            out.append(text[pos : f.start])
            out.append(f"[REDACTED:{f.kind}]")
            pos = f.end
        out.append(text[pos:])
        return Redaction("".join(out), dict(Counter(f.kind for f in findings)))


def _trigger_index(rules: Sequence[_Rule]) -> dict[tuple[str, bool], tuple[tuple[str, frozenset[int]], ...]]:
    """(scope, case-sensitive) -> ((trigger, ids of the rules it wakes up), ...)."""
    index: dict[tuple[str, bool], dict[str, set[int]]] = {}
    for i, rule in enumerate(rules):
        for trigger in rule.triggers:
            index.setdefault((rule.scope, rule.case_sensitive), {}).setdefault(trigger, set()).add(i)
    return {key: tuple((t, frozenset(ids)) for t, ids in by_trigger.items()) for key, by_trigger in index.items()}


_TRIGGERS = _trigger_index(_RULES)
_PREFILTERED = tuple((i, rule) for i, rule in enumerate(_RULES) if rule.prefilter is not None)

# Runs of characters a token can be made of; every "token"-scope rule matches inside one.
_TOKEN_RUN_RE = re.compile(r"[A-Za-z0-9_\-.:/+=~]{16,}")


def _lower_same_length(text: str) -> str:
    """``text.lower()`` with the same offsets (a few characters, like 'İ', lower to two)."""
    low = text.lower()
    if len(low) == len(text):
        return low
    return "".join(c if len(c.lower()) != 1 else c.lower() for c in text)


def _merge(raw: list[tuple[int, int, str, str, int]]) -> list[SecretFinding]:
    """Union of overlapping spans; the kind and rule of the highest-priority (then longest) member."""
    if not raw:
        return []
    raw.sort(key=lambda r: (r[0], -r[1]))
    merged: list[SecretFinding] = []
    cur_start, cur_end, best = raw[0][0], raw[0][1], raw[0]
    for item in raw[1:]:
        start, end = item[0], item[1]
        if start < cur_end:  # overlap: grow the span, keep the more specific kind
            cur_end = max(cur_end, end)
            if (item[4], item[1] - item[0]) > (best[4], best[1] - best[0]):
                best = item
            continue
        merged.append(SecretFinding(best[2], cur_start, cur_end, best[3]))
        cur_start, cur_end, best = start, end, item
    merged.append(SecretFinding(best[2], cur_start, cur_end, best[3]))
    return merged


# --------------------------------------------------------------------------------------
# Previews
# --------------------------------------------------------------------------------------

_LONG_TOKEN_RE = re.compile(r"[A-Za-z0-9+/=_\-.~]{16,}")


def _mask(value: str) -> str:
    return f"{value[:2]}\u2026[{len(value)} chars]"


def masked_preview(text: str, finding: SecretFinding, context: int = 24) -> str:
    """A one-line preview around the finding that never contains the secret: the secret part
    is shown as e.g. 'AK…[20 chars]' (at most the first 2 characters).

    Long tokens in the surrounding context, and other occurrences of the same value, are
    abbreviated the same way: the context of one finding is often another secret (the
    key id next to its secret key).
    """
    before = text[max(0, finding.start - context) : finding.start]
    after = text[finding.end : finding.end + context]
    secret = text[finding.start : finding.end]

    def clean(s: str) -> str:
        if len(secret) >= 3:  # the same secret again in the context ("postgres:postgres@")
            s = s.replace(secret, _mask(secret))
        s = _LONG_TOKEN_RE.sub(lambda m: _mask(m.group(0)), s)
        return s.replace("\r", " ").replace("\n", "\u23ce").replace("\t", " ")

    return f"{clean(before)}{_mask(secret)}{clean(after)}"
