"""The named checks, labels and spans that rules.toml refers to, for the cases that need code.

A rule's regex finds a candidate; these decide what a regex cannot say:

* ``CHECKS`` keep or drop a candidate: placeholders and made-up tokens, checksums (IBAN),
  decodable structure (JWT, base64 PEM), the context around the match (a connection string,
  a URL).  A check takes the :class:`Candidate` and the rule's ``check_args``.
* ``KINDS`` pick the redaction label from the match (the database behind a URI, the Slack
  token type); the rule's ``kind`` is the fallback.
* ``SPANS`` find the value when it is not one regex group (the password in
  ``curl -u user:password``, an e-mail's local part read backwards from the "@").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from rag_assets.privacy.secrets import ds_filters
from rag_assets.privacy.secrets.context import (
    in_connection_string,
    line_of,
    url_scheme_before,
)
from rag_assets.privacy.secrets.generic import (
    classify_ident,
    generic_value_ok,
    ident_parts,
)
from rag_assets.privacy.secrets.values import (
    PLACEHOLDER_SUBSTRINGS,
    aws_secret_ok,
    b64_decode,
    entropy,
    is_fake_token,
    is_placeholder,
    is_reference,
    token_shaped,
)


@dataclass(frozen=True)
class Candidate:
    """A regex match under review: ``text[start:end]`` is the ``value`` the rule would redact."""

    value: str
    start: int
    end: int
    match: re.Match[str]
    text: str


Check = Callable[..., bool]  # (candidate, **check_args) -> keep?
KindOf = Callable[[Candidate, str], str]  # (candidate, fallback kind) -> kind
Span = Callable[[re.Match[str], str], "tuple[int, int] | None"]  # (match, text) -> value span


# --------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------


def not_fake(c: Candidate, skip: int = 0, after: str | None = None, after_last: str | None = None) -> bool:
    """The random part of a vendor token is not obviously made up (ghp_xxxx, AKIA...EXAMPLE).

    The random part is the value after its fixed prefix: after the first ``after``, after the
    last ``after_last``, then ``skip`` characters on.
    """
    body = c.value
    if after is not None:
        body = body.split(after, 1)[-1]
    if after_last is not None:
        body = body.rsplit(after_last, 1)[-1]
    return not is_fake_token(body[skip:])


def not_placeholder(c: Candidate) -> bool:
    return not is_placeholder(c.value)


def aws_secret(c: Candidate) -> bool:
    return aws_secret_ok(c.value)


def aws_secret_near_key_id(c: Candidate) -> bool:
    # No keyword names it, so it must look more random than a keyword-named one.
    return aws_secret_ok(c.value) and entropy(c.value) >= 4.0


def slack(c: Candidate) -> bool:
    body = c.value.split("-", 1)[1] if "-" in c.value else c.value
    return len(body) >= 15 and any(ch.isdigit() for ch in body) and not is_fake_token(body)


def jwt(c: Candidate) -> bool:
    """The header decodes to a JSON object and the payload to something that starts like one."""
    parts = c.value.split(".")
    header = b64_decode(parts[0].rstrip("="), urlsafe=True)
    payload = b64_decode(parts[1].rstrip("="), urlsafe=True)
    if header is None or payload is None:
        return False
    try:
        decoded = json.loads(header)
    except ValueError:
        return False
    return isinstance(decoded, dict) and payload.lstrip()[:1] == b"{"


def base64_private_key(c: Candidate) -> bool:
    payload = re.sub(r"\s+", "", c.value)
    head = b64_decode(payload[: len(payload) - len(payload) % 4][:400])
    return head is not None and b"PRIVATE KEY" in head


def uri_password(c: Candidate) -> bool:
    # "user:password@", "app:${DB_PASSWORD}@", "u:%s@", "u:{password}@" are templates.
    return not (is_placeholder(c.value) or c.value.startswith(("$", "%", "{")))


def url_query_password(c: Candidate) -> bool:
    return url_scheme_before(c.match, c.text) is not None and not is_placeholder(c.value)


def connection_string(c: Candidate) -> bool:
    """Password=... inside a ``key=value;`` connection string (not a lone password= line)."""
    v = c.value.strip()
    if v[:1] in "\"'{" and len(v) >= 2:
        v = v[1:-1]
    if len(v) < 3:  # before the look-around: ";Password=x" * 100000 stops here
        return False
    return in_connection_string(c.text, c.match.start()) and not is_placeholder(v)


def basic_auth_header(c: Candidate) -> bool:
    value = c.value
    if is_placeholder(value) or len(value) < 8:
        return False
    decoded = b64_decode(value)
    if decoded is None:
        return token_shaped(value)
    try:
        text = decoded.decode("utf-8")
    except UnicodeDecodeError:
        return True
    if ":" in text:
        user, _, pw = text.partition(":")
        return not (is_placeholder(pw) or (not pw and is_placeholder(user)))
    return True


def bearer_token(c: Candidate) -> bool:
    return not is_placeholder(c.value) and token_shaped(c.value, min_len=12) and not is_fake_token(c.value)


_SK_PREFIXES = ("sk-or-", "sk-ant-", "sk-proj-", "sk-svcacct-", "sk-admin-")


def sk_key(c: Candidate) -> bool:
    token = c.value
    body = token[3:]
    if is_fake_token(body):
        return False
    if token.startswith(_SK_PREFIXES) or "T3BlbkFJ" in token:
        return True
    # A bare "sk-" + 32+ characters (DeepSeek, Moonshot, OpenAI legacy): random, not a slug.
    return token_shaped(body, min_len=32) and entropy(body) >= 3.5


def huggingface(c: Candidate) -> bool:
    body = c.value[3:]
    return not is_fake_token(body) and entropy(body) >= 3.5 and not body.islower()


def recovery_code(c: Candidate) -> bool:
    groups = c.value.split("-")
    body = "".join(groups)
    if is_fake_token(body) or entropy(body) < 3.0:
        return False
    if body.isdigit():  # BitLocker: eight groups of six digits
        return len(groups) >= 6
    # Letters and digits mixed inside the groups, not words joined by dashes (ABCD-EFGH-...).
    return sum(any(ch.isdigit() for ch in g) and any(ch.isalpha() for ch in g) for g in groups) >= 2


# IBAN lengths by country (ISO 13616 registry): a wrong length is not an IBAN.
_IBAN_LENGTHS = {
    "AD": 24,
    "AE": 23,
    "AL": 28,
    "AT": 20,
    "AZ": 28,
    "BA": 20,
    "BE": 16,
    "BG": 22,
    "BH": 22,
    "BR": 29,
    "BY": 28,
    "CH": 21,
    "CR": 22,
    "CY": 28,
    "CZ": 24,
    "DE": 22,
    "DK": 18,
    "DO": 28,
    "EE": 20,
    "EG": 29,
    "ES": 24,
    "FI": 18,
    "FO": 18,
    "FR": 27,
    "GB": 22,
    "GE": 22,
    "GI": 23,
    "GL": 18,
    "GR": 27,
    "GT": 28,
    "HR": 21,
    "HU": 28,
    "IE": 22,
    "IL": 23,
    "IQ": 23,
    "IS": 26,
    "IT": 27,
    "JO": 30,
    "KW": 30,
    "KZ": 20,
    "LB": 28,
    "LC": 32,
    "LI": 21,
    "LT": 20,
    "LU": 20,
    "LV": 21,
    "MC": 27,
    "MD": 24,
    "ME": 22,
    "MK": 19,
    "MR": 27,
    "MT": 31,
    "MU": 30,
    "NL": 18,
    "NO": 15,
    "PK": 24,
    "PL": 28,
    "PS": 29,
    "PT": 25,
    "QA": 29,
    "RO": 24,
    "RS": 22,
    "SA": 24,
    "SC": 31,
    "SE": 24,
    "SI": 19,
    "SK": 24,
    "SM": 27,
    "ST": 25,
    "SV": 28,
    "TL": 23,
    "TN": 24,
    "TR": 26,
    "UA": 29,
    "VA": 22,
    "VG": 24,
    "XK": 20,
}


def iban(c: Candidate) -> bool:
    """The country's IBAN length and the mod-97 checksum."""
    value = c.value.replace(" ", "")
    if _IBAN_LENGTHS.get(value[:2]) != len(value):
        return False
    digits = "".join(str(int(ch, 36)) for ch in value[4:] + value[:4])
    return int(digits) % 97 == 1


def _xml_tag_kind(m: re.Match[str]) -> str | None:
    """The generic kind for a tag name (UserSecretsId is an id, DbPassword a password)."""
    return classify_ident(ident_parts(m.group("tag").rsplit(":", 1)[-1]))


def xml_element(c: Candidate) -> bool:
    kind = _xml_tag_kind(c.match)
    if kind is None:
        return False
    tag = c.match.group("tag").rsplit(":", 1)[-1]
    return generic_value_ok(c.value.strip(), True, "=", kind, ident_parts(tag))


def ported_vendor_token(c: Candidate) -> bool:
    """A detect-secrets plugin's find (rules ported from it): its default filters, then no
    made-up token and no stand-in marker.  Not ``is_placeholder``: a Discord token reads like a
    dotted attribute path, which that takes for a reference."""
    if ds_filters.is_filtered(c.value, c.text, c.start) or is_fake_token(c.value):
        return False
    low = c.value.lower()
    return not any(marker in low for marker in PLACEHOLDER_SUBSTRINGS)


CHECKS: dict[str, Check] = {
    "not_fake": not_fake,
    "not_placeholder": not_placeholder,
    "aws_secret": aws_secret,
    "aws_secret_near_key_id": aws_secret_near_key_id,
    "slack": slack,
    "jwt": jwt,
    "base64_private_key": base64_private_key,
    "uri_password": uri_password,
    "url_query_password": url_query_password,
    "connection_string": connection_string,
    "basic_auth_header": basic_auth_header,
    "bearer_token": bearer_token,
    "sk_key": sk_key,
    "huggingface": huggingface,
    "recovery_code": recovery_code,
    "iban": iban,
    "xml_element": xml_element,
    "ported_vendor_token": ported_vendor_token,
}


# --------------------------------------------------------------------------------------
# Kinds
# --------------------------------------------------------------------------------------


def slack_kind(c: Candidate, default: str) -> str:
    token = c.value.lower()
    if token.startswith("xoxb-"):
        return "slack_bot_token"
    if token.startswith(("xoxp-", "xoxe.xoxp-")):
        return "slack_user_token"
    return default


def sk_kind(c: Candidate, default: str) -> str:
    token = c.value
    if token.startswith("sk-or-"):
        return "openrouter_api_key"
    if token.startswith("sk-ant-"):
        return "anthropic_api_key"
    if "T3BlbkFJ" in token or token.startswith(("sk-proj-", "sk-svcacct-", "sk-admin-")):
        return "openai_api_key"
    return default


_URI_KINDS = {
    "postgres": "postgres_uri",
    "postgresql": "postgres_uri",
    "pgsql": "postgres_uri",
    "postgis": "postgres_uri",
    "mysql": "mysql_uri",
    "mysqlx": "mysql_uri",
    "mysql2": "mysql_uri",
    "mariadb": "mysql_uri",
    "mongodb": "mongodb_uri",
    "mongodb+srv": "mongodb_uri",
    "redis": "redis_uri",
    "rediss": "redis_uri",
    "amqp": "amqp_uri",
    "amqps": "amqp_uri",
    "mssql": "sqlserver_connection_string",
    "sqlserver": "sqlserver_connection_string",
}
_SCHEME_BEFORE_RE = re.compile(r"(?<![A-Za-z0-9+.\-])(?:jdbc:)?([A-Za-z][A-Za-z0-9+.\-]{1,30})$")


def uri_scheme_kind(c: Candidate, default: str) -> str:
    """The database behind ``scheme://user:password@`` (the match starts at "://")."""
    m = c.match
    scheme = _SCHEME_BEFORE_RE.search(c.text, max(0, m.start() - 40), m.start())
    return _URI_KINDS.get(scheme.group(1).lower(), default) if scheme else default


def url_query_kind(c: Candidate, default: str) -> str:
    return _URI_KINDS.get(url_scheme_before(c.match, c.text) or "", default)


def connection_string_kind(c: Candidate, default: str) -> str:
    line = line_of(c.text, c.match.start()).lower()
    if any(k in line for k in ("server=", "data source=", "initial catalog=", "driver=", "trusted_connection")):
        return "sqlserver_connection_string"
    if "host=" in line and ("username=" in line or "port=" in line):
        return "postgres_uri"
    return default


def xml_tag_kind(c: Candidate, default: str) -> str:
    return _xml_tag_kind(c.match) or default


KINDS: dict[str, KindOf] = {
    "slack": slack_kind,
    "sk_key": sk_kind,
    "uri_scheme": uri_scheme_kind,
    "url_query_scheme": url_query_kind,
    "connection_string": connection_string_kind,
    "xml_tag": xml_tag_kind,
}


# --------------------------------------------------------------------------------------
# Spans
# --------------------------------------------------------------------------------------


def mailchimp_span(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """The 32 hex characters before the "-usN" the regex is anchored on, and the suffix."""
    start = m.start() - 32
    if start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        return None
    return None if is_fake_token(text[start : m.start()]) else (start, m.end())


def curl_credential_span(m: re.Match[str], _text: str) -> tuple[int, int] | None:
    """The span of the password in ``-u user:pass`` (or of the user when it is a bare token)."""
    raw = m.group("cred")
    start = m.start("cred")
    if raw[:1] in "\"'" and raw[-1:] == raw[:1]:
        raw, start = raw[1:-1], start + 1
    if ":" not in raw or is_reference(raw):
        return None  # no password (curl prompts for it), or "<user:password>", "$CREDS"
    user, _, pw = raw.partition(":")
    if pw:
        if is_placeholder(pw) or pw.startswith("$"):
            return None
        return start + len(user) + 1, start + len(raw)
    # "-u sk_live_...:" (an API key as the user name, empty password)
    if user and not is_placeholder(user) and token_shaped(user, min_len=16):
        return start, start + len(user)
    return None


_EMAIL_LOCAL_RE = re.compile(r"(?<![A-Za-z0-9._%+\-/])[A-Za-z0-9][A-Za-z0-9._%+\-]{0,63}$")
_FILE_EXTENSIONS = frozenset(
    "png jpg jpeg gif svg webp avif ico bmp tif tiff js mjs cjs ts tsx jsx css scss sass less json yaml yml "
    "toml html htm txt xml go py rb rs java kt php lock sum mod zip gz tgz tar".split()
)


# user@host as a command's destination, not a mailbox: the argument of ssh and its kin after their
# options ("ssh -p 2222 root@nas"), or the value of an option that names a host
# ("nixos-rebuild --target-host root@dns1", "-J admin@bastion"). Only the text of the same line
# before the address is read.
_REMOTE_COMMAND = r"(?:ssh|scp|sftp|rsync|mosh|autossh|ssh-copy-id|sshfs)\s+(?:-\S+\s+(?:[^\s-]\S*\s+)?)*"
_HOST_OPTION = r"(?:--?[\w-]*(?:host|target|remote|server|jump|dest)[\w-]*|-J)[ =]"
_COMMAND_LINE_DESTINATION_RE = re.compile(rf"(?:^|[\s;|&(`])(?:{_REMOTE_COMMAND}|{_HOST_OPTION})$")


def email_span(m: re.Match[str], text: str) -> tuple[int, int] | None:
    """The address around the "@domain" the regex matched: the local part is read backwards."""
    if m.group("tld").lower() in _FILE_EXTENSIONS:  # logo@2x.png
        return None
    local = _EMAIL_LOCAL_RE.search(text, max(0, m.start() - 64), m.start())
    if local is None:
        return None
    start = local.start()
    if start > 0 and text[start - 1] == ":" and text[max(0, start - 7) : start].lower() != "mailto:":
        return None  # user:pass@host is a URI credential, handled by the URI rule
    line_start = text.rfind("\n", max(0, start - 300), start) + 1
    if _COMMAND_LINE_DESTINATION_RE.search(text[max(line_start, start - 300) : start]):
        return None
    return start, m.end()


# Some ported patterns match their delimiters too (Artifactory: '(?:\s|=|:|"|^)AKC...').
_DELIMITERS = " \t\r\n\"'=:"


def trim_delimiters_span(m: re.Match[str], text: str) -> tuple[int, int] | None:
    start, end = m.span()
    while start < end and text[start] in _DELIMITERS:
        start += 1
    while end > start and text[end - 1] in _DELIMITERS:
        end -= 1
    return start, end


SPANS: dict[str, Span] = {
    "mailchimp": mailchimp_span,
    "curl_credential": curl_credential_span,
    "email": email_span,
    "trim_delimiters": trim_delimiters_span,
}
