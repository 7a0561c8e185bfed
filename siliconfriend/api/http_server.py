"""The HTTP server's own limits on a connection, for the web app's server and ``serve-api`` alike
(uvicorn's, whose HTTP/1.1 protocol has a keep-alive timeout but no limit on how long a request's
headers may take: a client sending a header line every few seconds held its connection forever).

* ``HEADER_TIMEOUT_S``: a connection has this long, from when it opens or its last response
  ended, to send a whole request head (the request line and every header); otherwise it is closed.
* ``KEEP_ALIVE_S``: an idle keep-alive connection is closed after this long (uvicorn's own timer).

Once a request's head is in, the app has it: the body is bounded by the API's size limit as it
streams in (``routes.py``), and a reply streams for as long as it takes.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Any, Iterator

HEADER_TIMEOUT_S = 15.0
KEEP_ALIVE_S = 5


def timed_protocol(base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
    """``base`` (a uvicorn HTTP protocol) closing a connection whose request head is not in within
    ``HEADER_TIMEOUT_S``. A request has begun once the protocol made its request cycle (both of
    uvicorn's HTTP/1.1 protocols make one per request, once its head is parsed); a connection that
    became a WebSocket is another protocol's and left alone."""

    class TimedProtocol(base):  # type: ignore[valid-type, misc]
        header_timeout = HEADER_TIMEOUT_S

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_header_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_header_timer()  # the next request's head has as long again

        def connection_lost(self, exc: Exception | None) -> None:
            timer = getattr(self, "_header_timer", None)
            if timer is not None:
                timer.cancel()
            super().connection_lost(exc)

        def _arm_header_timer(self) -> None:
            timer = getattr(self, "_header_timer", None)
            if timer is not None:
                timer.cancel()
            waiting_since = getattr(self, "cycle", None)
            self._header_timer = asyncio.get_running_loop().call_later(
                self.header_timeout, self._header_timed_out, waiting_since
            )

        def _header_timed_out(self, waiting_since: Any) -> None:
            transport = self.transport
            if transport.is_closing() or transport.get_protocol() is not self:
                return  # closed, or upgraded to a WebSocket
            if getattr(self, "cycle", None) is not waiting_since:
                return  # a request's head came in: the app has it
            transport.close()

    TimedProtocol.__name__ = TimedProtocol.__qualname__ = f"Timed{base.__name__}"
    return TimedProtocol


def stop_on_sigterm() -> None:
    """SIGTERM (a service manager's stop) raises KeyboardInterrupt in the main thread, as Ctrl-C
    does: the server stops and what the process holds is closed, instead of the process ending
    on the spot (Python's default) with its stores' write-ahead logs left beside them."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _h11() -> type[asyncio.Protocol]:
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    return timed_protocol(AutoHTTPProtocol)


def server_options() -> dict:
    """uvicorn's ``Config`` options for these limits (``uvicorn.run(app, **server_options())``)."""
    return {"http": _h11(), "timeout_keep_alive": KEEP_ALIVE_S}


@contextlib.contextmanager
def timed_servers() -> Iterator[None]:
    """uvicorn servers configured meanwhile with the default ("auto") HTTP protocol get the timed
    one: for a server that a library configures itself (Gradio's ``launch``), which loads its
    protocol class once, at its start."""
    from uvicorn import config

    before = config.HTTP_PROTOCOLS["auto"]
    config.HTTP_PROTOCOLS["auto"] = f"{__name__}:AUTO_TIMED"
    try:
        yield
    finally:
        config.HTTP_PROTOCOLS["auto"] = before


def __getattr__(name: str) -> Any:
    # uvicorn imports the protocol class by name ("module:AUTO_TIMED"), made on first use
    if name == "AUTO_TIMED":
        return _h11()
    raise AttributeError(name)


__all__ = ["HEADER_TIMEOUT_S", "KEEP_ALIVE_S", "server_options", "stop_on_sigterm", "timed_protocol", "timed_servers"]
