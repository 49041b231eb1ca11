"""The ingest server's listening socket: accepted connections have Nagle off (asyncio sets TCP_NODELAY only on
sockets whose proto says TCP; with proto 0 every two-part answer waited ~40 ms for a delayed ACK), a busy port is
a clear error."""

from __future__ import annotations

import asyncio
import socket

import pytest

from rl_insight.errors import PortInUseError
from rl_insight.server.http.net import bind_socket, free_port


def test_accepted_connections_have_nagle_off() -> None:
    sock = bind_socket("127.0.0.1", free_port())
    seen: list[int] = []

    async def main() -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            seen.append(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(handle, sock=sock)
        _, w = await asyncio.open_connection(*sock.getsockname())
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        w.close()
        server.close()

    asyncio.run(main())
    assert seen and seen[0] != 0


def test_a_busy_port_names_itself() -> None:
    sock = bind_socket("127.0.0.1", free_port())
    try:
        with pytest.raises(PortInUseError, match=str(sock.getsockname()[1])):
            bind_socket("127.0.0.1", sock.getsockname()[1])
    finally:
        sock.close()
