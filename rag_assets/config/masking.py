"""Secrets never printed: which configuration values look like keys, tokens or passwords."""

from __future__ import annotations

import re
from typing import Any

from rag_assets.config.schema import Loc

# --- Secrets never printed ----------------------------------------------------------------

_SECRET_KEY = re.compile(r"(key|token|secret|passw|credential|auth)", re.IGNORECASE)
_TOKEN_PREFIX = re.compile(r"^(sk-|sk_|pk_|rk_|ghp_|gho_|github_pat_|glpat-|xox[abp]-|hf_|AKIA)")
_LONG_TOKEN = re.compile(r"[A-Za-z0-9_+=-]{32,}")
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@/\s]+@")
# A secret in a URL's query string: ?api_key=..., &token=..., &password=...
_URL_QUERY_SECRET = re.compile(r"([?&][^=&#\s]*(?:key|token|secret|passw|auth|sig)[^=&#\s]*=)[^&#\s]+", re.IGNORECASE)
MASK = "***"


def looks_secret(key: str, value: Any) -> bool:
    """A value to keep off the screen: under a key/token/password key, or shaped like a token."""
    if not isinstance(value, str) or not value:
        return False
    if key != "api_key_env" and _SECRET_KEY.search(key):
        return True
    return bool(_TOKEN_PREFIX.match(value)) or _looks_random(value)


def _looks_random(value: str) -> bool:
    """A long run of letters and digits (API keys, hex tokens); not a path or model name."""
    return (
        bool(_LONG_TOKEN.fullmatch(value))
        and sum(c.isdigit() for c in value) >= 4
        and sum(c.isalpha() for c in value) >= 4
    )


def mask_secrets(value: Any, key: str = "") -> Any:
    """``value`` with anything that looks like a key, token or password replaced by ***."""
    if isinstance(value, dict):
        return {k: mask_secrets(v, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [mask_secrets(v, key) for v in value]
    if looks_secret(key, value):
        return MASK
    if isinstance(value, str):
        return mask_url(value)
    return value


def mask_url(text: str) -> str:
    """A URL (or text holding one) with its password and secret query values replaced by ***."""
    return _URL_QUERY_SECRET.sub(rf"\1{MASK}", _URL_PASSWORD.sub(rf"\1{MASK}@", text))


def shown_value(loc: Loc, value: Any) -> str:
    """The bad value for an error message: masked if secret-like, cut short if long."""
    key = next((str(p) for p in reversed(loc) if isinstance(p, str)), "")
    text = repr(mask_secrets(value, key))
    return text if len(text) <= 80 else text[:77] + "..."
