"""Access tokens for ``rag serve`` beyond loopback: created, listed and revoked by ``rag token``,
verified by the server (:mod:`rag_assets.serve.access`).

A token reads ``rag_<id>_<secret>``: ``id`` (12 hex digits) finds its record without trying
every hash; ``secret`` (32 random bytes, URL-safe base64) is what proves it. The file keeps,
per token, its name, id, scopes, creation and expiry times, a random salt and the scrypt hash
of the whole token, never the token: whoever reads the file cannot present one. It is written
with mode 0600 (its folder 0700), atomically (a reader sees the old or the new file, never half).

scrypt is slow on purpose (about 50 ms here), so a server verifies a presented token once and
keeps the answer in memory, keyed by the token's SHA-256, until the file changes (its mtime,
size or inode): ``rag token revoke`` takes effect on the next request. A token whose id is
unknown is refused without hashing, so made-up tokens cost nothing.

Nothing here ever logs or raises with a token, or any part of one, in its text.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: `rag --help` builds no config models
    from rag_assets.config import RagConfig

log = logging.getLogger("rag_assets.serve.tokens")

GRANTABLE_SCOPES = ("safe", "private", "admin")
TOKEN_PATTERN = re.compile(r"rag_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# scrypt's cost: 2^14 x 8 x 128 bytes = 16 MiB of memory and tens of milliseconds per try.
SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
MAX_CACHED = 10_000  # verification answers kept; past it the cache starts over


class TokenError(ValueError):
    """A token command that cannot be done as asked (bad name or scope, unknown name, a bad
    file path); the message says what to do instead."""


@dataclass(frozen=True)
class TokenRecord:
    """One token as stored: everything but the token itself."""

    name: str
    id: str
    scopes: tuple[str, ...]
    created: str  # ISO 8601, UTC
    expires: str | None  # ISO 8601, UTC; None: never
    salt: str  # hex
    digest: str  # hex scrypt of the whole token

    def expired(self, now: datetime | None = None) -> bool:
        if self.expires is None:
            return False
        return (now or datetime.now(UTC)) >= datetime.fromisoformat(self.expires)

    def listing(self) -> dict[str, Any]:
        """What ``rag token list`` shows: no id, salt or hash."""
        return {
            "name": self.name,
            "scopes": list(self.scopes),
            "created": self.created,
            "expires": self.expires,
            "expired": self.expired(),
        }


def default_token_file(environ: Mapping[str, str]) -> Path:
    """``$XDG_CONFIG_HOME/rag-assets/tokens.json`` (``~/.config`` when the variable is unset)."""
    base = environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "rag-assets" / "tokens.json"


def token_file_path(cfg: RagConfig, environ: Mapping[str, str] | None = None) -> Path:
    """Where the tokens live: ``$RAG_TOKEN_FILE``, else ``serve.token_file``, else the XDG default.

    A path inside the output folder is refused: that folder is what gets published, backed up
    and shared, and a token file there would travel with it."""
    env = os.environ if environ is None else environ
    chosen = env.get("RAG_TOKEN_FILE") or cfg.serve.token_file or default_token_file(env)
    path = Path(os.path.expanduser(str(chosen))).resolve()
    output = cfg.output_dir.resolve()
    if path == output or output in path.parents:
        raise TokenError(
            f"the token file {path} is inside the output folder {output}, which is published and shared; "
            "set serve.token_file in rag.yaml or $RAG_TOKEN_FILE to a path outside it "
            "(the default is ~/.config/rag-assets/tokens.json)"
        )
    return path


def parse_scopes(text: str) -> tuple[str, ...]:
    """``"safe,admin"`` -> ("safe", "admin"); TokenError naming an unknown scope."""
    scopes = tuple(dict.fromkeys(s.strip().lower() for s in text.split(",") if s.strip()))
    unknown = [s for s in scopes if s not in GRANTABLE_SCOPES]
    if unknown:
        raise TokenError(
            f"unknown scope(s) {', '.join(unknown)}; give some of {', '.join(GRANTABLE_SCOPES)} "
            "(the public tier needs no token)"
        )
    if not scopes:
        raise TokenError(f"give at least one scope: {', '.join(GRANTABLE_SCOPES)}")
    return scopes


def _hash(token: str, salt: bytes) -> bytes:
    return hashlib.scrypt(token.encode(), salt=salt, **SCRYPT)


def token_digest(token: str) -> bytes:
    """The fast digest verification answers are cached under (never stored or logged)."""
    return hashlib.sha256(token.encode()).digest()


class TokenStore:
    """The token file, read when it changes, and the cache of verified tokens."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stat: tuple[int, int, int] | None = None
        self._records: dict[str, TokenRecord] = {}
        self._verified: dict[bytes, str | None] = {}  # SHA-256 of a token -> its record's id, or None

    # ------------------------------------------------------------------ reading

    def _file_key(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def records(self) -> dict[str, TokenRecord]:
        """The records by id, re-read when the file changed since the last call."""
        key = self._file_key()
        with self._lock:
            if key != self._stat or key is None:
                self._records = self._read() if key is not None else {}
                self._stat = key
                self._verified.clear()  # a revoked or replaced token must not stay verified
            return self._records

    def _read(self) -> dict[str, TokenRecord]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            entries = data["tokens"]
            return {e["id"]: TokenRecord(**{**e, "scopes": tuple(e["scopes"])}) for e in entries}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # No token is accepted from a file that cannot be read: fail closed, say where.
            log.error(
                "cannot read the token file %s (%s); every token is refused until it is fixed",
                self.path,
                type(exc).__name__,
            )
            return {}

    def list(self) -> list[TokenRecord]:
        return sorted(self.records().values(), key=lambda r: r.created)

    def find(self, record_id: str) -> TokenRecord | None:
        """The current, unexpired record with this id (a session's token, checked per request)."""
        record = self.records().get(record_id)
        return record if record is not None and not record.expired() else None

    # ------------------------------------------------------------------ verifying

    def cached(self, token: str) -> tuple[bool, TokenRecord | None]:
        """(known, record): whether this token's answer is cached, and the answer. Fast."""
        records = self.records()
        match = TOKEN_PATTERN.fullmatch(token)
        if match is None or match.group(1) not in records:
            return True, None  # malformed or unknown id: refused without hashing
        with self._lock:
            if token_digest(token) not in self._verified:
                return False, None
            record_id = self._verified[token_digest(token)]
        return True, self.find(record_id) if record_id else None

    def verify(self, token: str) -> TokenRecord | None:
        """The record of a valid, unexpired token, else None (scrypt on the first sight only)."""
        known, record = self.cached(token)
        if known:
            return record
        match = TOKEN_PATTERN.fullmatch(token)
        candidate = self.records().get(match.group(1)) if match else None
        ok = candidate is not None and hmac.compare_digest(
            _hash(token, bytes.fromhex(candidate.salt)), bytes.fromhex(candidate.digest)
        )
        with self._lock:
            if len(self._verified) >= MAX_CACHED:
                self._verified.clear()
            self._verified[token_digest(token)] = candidate.id if ok and candidate else None
        return self.find(candidate.id) if ok and candidate else None

    # ------------------------------------------------------------------ changing

    def create(self, name: str, scopes: tuple[str, ...], expires_days: int | None = None) -> str:
        """A new token (returned once, never stored) named ``name`` with ``scopes``."""
        if not NAME_PATTERN.fullmatch(name):
            raise TokenError("a token name is 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
        if expires_days is not None and not 1 <= expires_days <= 36_500:
            raise TokenError("--expires is a number of days between 1 and 36500")
        with self._locked_file():
            current = self._read() if self.path.exists() else {}
            if any(r.name == name for r in current.values()):
                raise TokenError(
                    f"a token named {name!r} exists; revoke it first (`rag token revoke {name}`) or choose another name"
                )
            record_id = secrets.token_hex(6)
            token = f"rag_{record_id}_{base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip('=')}"
            salt = secrets.token_bytes(16)
            now = datetime.now(UTC).replace(microsecond=0)
            expires = (now + timedelta(days=expires_days)).isoformat() if expires_days else None
            current[record_id] = TokenRecord(
                name, record_id, scopes, now.isoformat(), expires, salt.hex(), _hash(token, salt).hex()
            )
            self._write(current)
        return token

    def revoke(self, name: str) -> bool:
        """Remove the token named ``name``; False when there is none."""
        with self._locked_file():
            current = self._read() if self.path.exists() else {}
            kept = {i: r for i, r in current.items() if r.name != name}
            if len(kept) == len(current):
                return False
            self._write(kept)
        return True

    @contextmanager
    def _locked_file(self) -> Iterator[None]:
        """Hold an exclusive lock beside the file: two `rag token` commands never lose each other's change."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write(self, records: dict[str, TokenRecord]) -> None:
        data = {"version": 1, "tokens": [{**asdict(r), "scopes": list(r.scopes)} for r in records.values()]}
        fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=self.path.parent)  # mkstemp: mode 0600
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(data, out, indent=2)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
