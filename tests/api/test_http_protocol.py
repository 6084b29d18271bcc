"""api.http_protocol under a real uvicorn on loopback: a response's head and body go out in
one socket write (uvicorn's own protocol writes them apart), and keep-alive, pipelining, a closing
response, a large body and a streamed one come through whole."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn
from starlette.types import Receive, Scope, Send
from svc_harness import free_port
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.http_protocol import CoalescingHttpToolsProtocol

BIG = b"x" * (4 << 20)  # past the socket's buffers: written in parts, under flow control


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    headers = [(b"content-type", b"text/plain")]
    if path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for part in (b"one,", b"two,", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
            await asyncio.sleep(0)
        await send({"type": "http.response.body", "body": b""})
        return
    body = BIG if path == "/big" else path.encode()
    headers.append((b"content-length", b"%d" % len(body)))
    if path == "/close":
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@contextmanager
def serving(http: type | str) -> Iterator[int]:
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=http, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(20)


def _request(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode()


def _read_response(sock: socket.socket, pending: bytearray) -> tuple[bytes, bytes]:
    """(head, body) of the next response (Content-Length or chunked), reading into `pending`."""
    while b"\r\n\r\n" not in pending:
        pending += _recv(sock)
    head, _, rest = bytes(pending).partition(b"\r\n\r\n")
    pending[:] = rest
    fields = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:] if b": " in line)
    if b"content-length" in fields:
        size = int(fields[b"content-length"])
        while len(pending) < size:
            pending += _recv(sock)
        body = bytes(pending[:size])
        del pending[:size]
        return head, body
    assert fields.get(b"transfer-encoding") == b"chunked"
    body = b""
    while True:
        while b"\r\n" not in pending:
            pending += _recv(sock)
        line, _, _ = bytes(pending).partition(b"\r\n")
        size = int(line, 16)
        while len(pending) < len(line) + 2 + size + 2:
            pending += _recv(sock)
        body += bytes(pending[len(line) + 2 : len(line) + 2 + size])
        del pending[: len(line) + 2 + size + 2]
        if size == 0:
            return head, body


def _recv(sock: socket.socket) -> bytes:
    data = sock.recv(1 << 20)
    if not data:
        raise ConnectionError("closed")
    return data


class _CountingTransport:
    """The server's real transport, its `write` calls recorded (everything else forwarded)."""

    def __init__(self, transport: Any, writes: list[bytes]) -> None:
        self._transport = transport
        self._writes = writes

    def write(self, data: bytes) -> None:
        self._writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


WRITES: list[bytes] = []


class _CountedCoalescing(CoalescingHttpToolsProtocol):
    def connection_made(self, transport: Any) -> None:
        super().connection_made(_CountingTransport(transport, WRITES))


class _CountedUvicorn(HttpToolsProtocol):
    def connection_made(self, transport: Any) -> None:
        super().connection_made(_CountingTransport(transport, WRITES))


def _writes_per_response(http: type) -> list[list[bytes]]:
    """The socket writes the server made for each of 5 requests on one connection."""
    per: list[list[bytes]] = []
    with serving(http) as port, socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        pending = bytearray()
        for i in range(5):
            WRITES.clear()
            sock.sendall(_request(f"/r{i}"))
            assert _read_response(sock, pending)[1] == f"/r{i}".encode()
            per.append(list(WRITES))
    return per


def test_head_and_body_go_out_in_one_write() -> None:
    for i, writes in enumerate(_writes_per_response(_CountedCoalescing)):
        assert len(writes) == 1, writes
        assert writes[0].startswith(b"HTTP/1.1 200 OK") and writes[0].endswith(b"\r\n\r\n/r%d" % i)


def test_uvicorns_own_protocol_writes_head_and_body_apart() -> None:
    """The condition the coalescing is for (if uvicorn joins them itself, this fails and the
    protocol can go)."""
    for i, writes in enumerate(_writes_per_response(_CountedUvicorn)):
        assert len(writes) == 2 and writes[1] == b"/r%d" % i, writes


@pytest.mark.parametrize("http", [CoalescingHttpToolsProtocol, "httptools"])
def test_keep_alive_pipelining_close_big_and_streamed_responses_are_whole(
    http: type | str,
) -> None:
    with serving(http) as port, socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        pending = bytearray()
        for path in ("/a", "/b"):  # one after the other on one connection
            sock.sendall(_request(path))
            assert _read_response(sock, pending)[1] == path.encode()
        sock.sendall(_request("/c") + _request("/d") + _request("/stream"))  # pipelined
        assert [_read_response(sock, pending)[1] for _ in range(3)] == [
            b"/c",
            b"/d",
            b"one,two,three",
        ]
        sock.sendall(_request("/big"))
        assert _read_response(sock, pending)[1] == BIG
        sock.sendall(_request("/close"))
        head, body = _read_response(sock, pending)
        assert body == b"/close" and b"connection: close" in head.lower()
        sock.settimeout(5)
        assert sock.recv(10) == b""  # and the server closed the connection after it
