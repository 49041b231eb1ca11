"""Socket helpers shared by the server and the supervisor: binding, free ports, local IP."""

from __future__ import annotations

import errno
import socket

from ...errors import PortInUseError


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def bind_socket(host: str, port: int) -> socket.socket:
    """Bind a listening TCP socket; a busy port is a PortInUseError naming it."""
    # IPPROTO_TCP, not 0: asyncio turns Nagle off only on sockets that say they are TCP, and accepted sockets inherit
    # the proto; with 0 every answer written in two parts waited ~40 ms for a delayed ACK
    sock = socket.socket(_family(host), socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            raise PortInUseError(f"port {port} on {host} is already in use" if exc.errno == errno.EADDRINUSE
                                 else f"no permission to bind port {port} on {host}",
                                 hint="stop what is using it, choose another --port, or pass --auto-port") from None
        raise PortInUseError(f"cannot bind {host}:{port}: {exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def port_is_free(host: str, port: int) -> bool:
    try:
        bind_socket(host, port).close()
        return True
    except PortInUseError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(_family(host), socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def detect_ip() -> str | None:
    """The address other hosts would reach us on: source address of a UDP 'connect' (sends nothing)."""
    for probe in ("10.255.255.255", "8.8.8.8"):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((probe, 1))
                ip = s.getsockname()[0]
            if not ip.startswith("127."):
                return ip
        except OSError:
            continue
    try:
        ip = socket.gethostbyname(socket.gethostname())
        return None if ip.startswith("127.") else ip
    except OSError:
        return None


def public_url(configured: str | None, host: str, port: int) -> str:
    """Where people reach a server: `configured` (--public-url), else this host's address and port (what `server
    start` prints)."""
    if configured:
        return configured
    if host in ("0.0.0.0", "::", ""):
        host = detect_ip() or "127.0.0.1"
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"
