"""uvicorn's httptools protocol with its socket writes coalesced: what a connection writes in
one step of the event loop goes out as one write.

uvicorn writes a response's status line and headers when the app sends
`http.response.start`, and its body when the app sends the body: two writes, so two `send`
system calls and, with TCP_NODELAY, two segments the client reads one by one. The app sends
both messages in the same step (nothing in between waits), so holding writes until that step
ends (`loop.call_soon`) joins them without delaying either. A close (keep-alive off, an error)
first writes what is held. `meshplan serve` and bench/api_load.py run uvicorn with
`http=CoalescingHttpToolsProtocol` (`--http api.http_protocol:CoalescingHttpToolsProtocol`)."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

IMPORT_PATH = "api.http_protocol:CoalescingHttpToolsProtocol"


class CoalescingTransport:
    """`transport`, with writes held until the end of the loop step that made them (every other
    method is the transport's own)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Write what is held (nothing once the transport is closing)."""
        if not self._held:
            return
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(b) for b in self._held)

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """HttpToolsProtocol on a CoalescingTransport."""

    def connection_made(self, transport: Any) -> None:
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
