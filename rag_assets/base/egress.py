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
from dataclasses import dataclass
from typing import Mapping

import httpx

from rag_assets.config.providers import endpoint_allowed, is_loopback_host


class PrivacyError(RuntimeError):
    """Private text was about to leave the machine; nothing was sent."""


def resolve(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, in the resolver's order, without duplicates."""
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
            raise httpx.ConnectError(f"{url.host} resolves to no address")
        return addresses

    def client(self, *, timeout: float = 30.0, headers: Mapping[str, str] | None = None) -> httpx.Client:
        """An httpx client that can reach only approved hosts, directly, without redirects."""
        return httpx.Client(
            timeout=timeout,
            headers=headers,
            transport=PinnedTransport(self),
            trust_env=False,  # no proxy variables: a proxy would receive the text itself
            follow_redirects=False,
        )


class PinnedTransport(httpx.BaseTransport):
    """Sends each request to an address :meth:`PrivateEgress.approved_addresses` checked,
    with no proxy, and refuses any redirect the answer asks for."""

    def __init__(self, egress: PrivateEgress) -> None:
        self._egress = egress
        self._direct = httpx.HTTPTransport(trust_env=False)  # no proxy argument: direct connections only

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self._send_to_first_listening(request, self._egress.approved_addresses(request.url))
        if 300 <= response.status_code < 400:
            response.close()
            raise PrivacyError(
                f"refusing to follow HTTP {response.status_code} from {request.url} to "
                f"{response.headers.get('location', 'an unnamed place')}: the local endpoint tried to redirect "
                "private text elsewhere; nothing was sent there"
            )
        return response

    def _send_to_first_listening(self, request: httpx.Request, addresses: list[str]) -> httpx.Response:
        # As a direct connection would: ``localhost`` may resolve to ::1 first while Ollama
        # listens on 127.0.0.1 only. A refused connection has sent nothing, so trying the next
        # checked address is safe.
        for address in addresses[:-1]:
            try:
                return self._direct.handle_request(pinned(request, address))
            except httpx.ConnectError:
                continue
        return self._direct.handle_request(pinned(request, addresses[-1]))

    def close(self) -> None:
        self._direct.close()


def pinned(request: httpx.Request, address: str) -> httpx.Request:
    """``request`` addressed to ``address`` instead of its host name. The Host header (set when
    the request was built) still names the host, and TLS still checks the certificate for it."""
    extensions = dict(request.extensions)
    if request.url.scheme == "https":
        extensions["sni_hostname"] = request.url.host
    return httpx.Request(
        request.method,
        request.url.copy_with(host=address),
        headers=request.headers,
        content=request.read(),
        extensions=extensions,
    )
