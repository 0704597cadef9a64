"""The transport of :meth:`rag_assets.base.egress.PrivateEgress.client`: every request goes to an
address the egress rule checked, directly, and no redirect is followed.

Apart from egress.py so that importing the rule does not import httpx: a process that never
sends anything (``rag search`` with the offline embedder) starts without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx

from rag_assets.base.privacy_error import PrivacyError

if TYPE_CHECKING:  # egress.py imports this module when it builds a client
    from rag_assets.base.egress import PrivateEgress


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
