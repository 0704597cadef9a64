"""Where private text may go: the approved local hosts, and the only HTTP client that sends to them.

A host is approved for private text when it is loopback (``localhost``, ``127.0.0.0/8``,
``::1``) or listed in ``private_tier.allowed_hosts``. Approval is by the name as written,
never by what it resolves to: DNS could point a trusted-looking name anywhere.

Checking the URL is not enough on its own, because the HTTP client decides where the bytes
really go. httpx by default sends through whatever ``HTTP_PROXY``/``HTTPS_PROXY``/
``ALL_PROXY`` name, even for ``127.0.0.1``, and a client may follow redirects. So the client
made by :meth:`PrivateEgress.client`:

- ignores the environment (``trust_env=False``: no proxy variables, no ``.netrc``) and has no
  proxy and no mounts;
- follows no redirect, and treats any 3xx answer as a refusal (:class:`PrivacyError`);
- checks every request's host, resolves it once itself, requires ``localhost`` to resolve to
  loopback addresses only, and connects to the very address it checked, so a second DNS
  answer cannot send the text elsewhere.

Use it for anything that carries private text (embedding batches, query embeddings, a
future chat call) and for the probes of those hosts.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rag_assets.base.privacy_error import PrivacyError
from rag_assets.config.providers import endpoint_allowed, is_loopback_host

__all__ = ["PrivacyError", "PrivateEgress", "resolve"]


if TYPE_CHECKING:
    import httpx


def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, in the resolver's order, without duplicates."""
    import httpx  # here, not at the top: `rag search` with the offline embedder never loads it

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise httpx.ConnectError(f"cannot resolve {host}: {exc}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass(frozen=True)
class PrivateEgress:
    """The Private tier's egress rule: loopback, or the hosts the owner listed, and nothing else."""

    allowed_hosts: tuple[str, ...] = ()

    def allows(self, url: str) -> bool:
        return endpoint_allowed(url, self.allowed_hosts)

    def check_url(self, url: str) -> None:
        """PrivacyError unless ``url``'s host is approved."""
        if not self.allows(url):
            raise PrivacyError(
                f"refusing to send private text to {url}: not a loopback address nor a host listed in "
                "private_tier.allowed_hosts"
            )

    def approved_addresses(self, url: httpx.URL) -> list[str]:
        """The IP addresses to connect to for ``url``: its host approved, resolved once, and for
        a loopback name every answer loopback (a tampered resolver or hosts file gets nothing)."""
        self.check_url(str(url))
        port = url.port or (443 if url.scheme == "https" else 80)
        addresses = resolve(url.host, port)
        if is_loopback_host(url.host):
            strays = [a for a in addresses if not ipaddress.ip_address(a).is_loopback]
            if strays:
                raise PrivacyError(
                    f"refusing to send private text to {url}: {url.host} resolves to {strays[0]}, "
                    "not a loopback address"
                )
        if not addresses:
            import httpx

            raise httpx.ConnectError(f"{url.host} resolves to no address")
        return addresses

    def client(self, *, timeout: float = 30.0, headers: Mapping[str, str] | None = None) -> httpx.Client:
        """An httpx client that can reach only approved hosts, directly, without redirects."""
        import httpx

        from rag_assets.base.pinned_transport import PinnedTransport

        return httpx.Client(
            timeout=timeout,
            headers=headers,
            transport=PinnedTransport(self),
            trust_env=False,  # no proxy variables: a proxy would receive the text itself
            follow_redirects=False,
        )
