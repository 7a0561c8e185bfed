"""Who is on the other end of a web request: the peer's address, or, when the peer is a proxy
the operator lists in ``trusted_proxies``, the address that proxy says it forwarded for.

``X-Forwarded-For`` is read from the right: each trusted proxy appends the address it received
from, so the first address from the right that is not a trusted proxy is the client. A header
from anyone else is ignored (it is whatever the sender wanted it to be).
"""

from __future__ import annotations

import ipaddress
from typing import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def proxy_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """``["10.0.0.1", "192.168.0.0/16", "::1"]`` as networks; a bad entry is a ValueError that names it."""
    nets = []
    for entry in entries or ():
        try:
            nets.append(ipaddress.ip_network(str(entry).strip(), strict=False))
        except ValueError:
            raise ValueError(f"trusted_proxies: {entry!r} is not an IP address or network") from None
    return tuple(nets)


def _is_trusted(address: str, nets: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError:
        return False
    return any(ip in net for net in nets)


def client_address(peer: str | None, forwarded_for: str | None, trusted: tuple[Network, ...]) -> str | None:
    """The client's address. ``peer``: the TCP peer; ``forwarded_for``: the X-Forwarded-For
    header (every occurrence joined with commas), or None."""
    if not peer or not _is_trusted(peer, trusted) or not forwarded_for:
        return peer
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    for hop in reversed(hops):
        if not _is_trusted(hop, trusted):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return peer  # a malformed entry: the last proxy we trust is who we know
    return hops[0] if hops else peer


def request_client(request, trusted: tuple[Network, ...]) -> str | None:
    """``client_address`` of a Gradio / Starlette request (None without one)."""
    if request is None:
        return None
    client = getattr(request, "client", None)
    peer = getattr(client, "host", None)
    headers = getattr(request, "headers", None) or {}
    getall = getattr(headers, "getlist", None) or getattr(headers, "get_list", None)
    values = (
        getall("x-forwarded-for")
        if getall
        else [headers.get("x-forwarded-for")]
        if headers.get("x-forwarded-for")
        else []
    )
    return client_address(peer, ",".join(v for v in values if v) or None, trusted)


# -- the browser ------------------------------------------------------------------------------------
BROWSER_COOKIE = "sf_browser"


def browser_id(request) -> str | None:
    """The random id this app's cookie gives the requesting browser (None without one): what an
    export link is bound to, next to the session that asked."""
    try:  # a Starlette request's cookies, or the dict-like copy a queued Gradio request keeps
        cookies = getattr(request, "cookies", None) if request is not None else None
        value = cookies[BROWSER_COOKIE] if cookies is not None and BROWSER_COOKIE in cookies else None
    except (AttributeError, KeyError, TypeError):
        value = None
    return value if isinstance(value, str) and 20 <= len(value) <= 100 else None


class BrowserCookie:
    """ASGI middleware: every response to a browser without the cookie sets one (HttpOnly, so no
    script of the page reads it; SameSite=Strict). The session token itself lives in the page's
    storage, which a plain link does not carry: the cookie is what a download can be checked by."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        header = b"; ".join(v for k, v in scope.get("headers", []) if k == b"cookie").decode("latin-1")
        has = any(part.strip().startswith(BROWSER_COOKIE + "=") for part in header.split(";"))
        if has:
            return await self.app(scope, receive, send)
        import secrets

        cookie = (
            f"{BROWSER_COOKIE}={secrets.token_urlsafe(24)}; Path=/; HttpOnly; SameSite=Strict; Max-Age=31536000"
        ).encode("latin-1")

        async def send_with_cookie(message):
            if message.get("type") == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"set-cookie", cookie)]}
            await send(message)

        return await self.app(scope, receive, send_with_cookie)
