"""Where a PostgreSQL store URL connects, and whether that is this machine (the Private tier's rule).

The Private tier may keep its store in PostgreSQL only at a local address: a Unix socket or
a loopback host (``localhost``, ``127.0.0.0/8``, ``::1``), as its embedder may only be local.
Hosts are judged as written, never by what they resolve to, and every way libpq picks a
server counts: the URL's hosts, ``host=`` and ``hostaddr=`` query parameters, and, when
the URL names none, the ``PGHOST``/``PGHOSTADDR`` environment variables. A ``service``
(a pg_service.conf entry) could point anywhere, so it is refused for the Private tier.
No psycopg here: the configuration is checked before any optional package is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import parse_qs, unquote, urlsplit

from rag_assets.config.providers import is_loopback_host

UNKNOWN = "?"  # a server chosen by a service file: cannot be proved local


def connection_hosts(url: str, environ: Mapping[str, str]) -> list[str]:
    """Every host or socket folder libpq may connect to for ``url`` ('' = the default socket)."""
    parts = urlsplit(url)
    query = {k: v for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    hosts: list[str] = []
    netloc = parts.netloc.rsplit("@", 1)[-1]
    for entry in netloc.split(","):
        hosts.append(_strip_port(unquote(entry)))
    for key in ("host", "hostaddr"):
        for value in query.get(key, []):
            hosts.extend(h.strip() for h in value.split(","))
    if "service" in query:
        hosts.append(UNKNOWN)
    named = [h for h in hosts if h]
    if not named:  # libpq falls back to the environment, then to the default Unix socket
        for var in ("PGHOST", "PGHOSTADDR"):
            named.extend(h.strip() for h in environ.get(var, "").split(",") if h.strip())
        if environ.get("PGSERVICE"):
            named.append(UNKNOWN)
    return named or [""]


def _strip_port(entry: str) -> str:
    if entry.startswith("["):  # [::1]:5432
        return entry[1 : entry.index("]")] if "]" in entry else entry
    return entry.rsplit(":", 1)[0] if entry.count(":") == 1 else entry


def is_local_host(host: str) -> bool:
    """A Unix socket (a folder path, '' for the default, '@' for an abstract one) or loopback."""
    if host == UNKNOWN:
        return False
    return host == "" or host.startswith(("/", "@")) or is_loopback_host(host)


def is_local_url(url: str, environ: Mapping[str, str]) -> bool:
    return all(is_local_host(h) for h in connection_hosts(url, environ))


def private_store_problem(url: str | None, environ: Mapping[str, str]) -> str | None:
    """Why this PostgreSQL URL may not hold the Private tier, or None when it is local."""
    if url is None:
        return None
    remote = [h for h in connection_hosts(url, environ) if not is_local_host(h)]
    if not remote:
        return None
    shown = ", ".join("a service file's server" if h == UNKNOWN else h for h in remote)
    return (
        f"the Private tier's store would be at {shown}, not on this machine; with vaults configured the "
        "PostgreSQL store must be local (a Unix socket, localhost, 127.0.0.1 or ::1), as private notes never "
        "leave the machine"
    )
