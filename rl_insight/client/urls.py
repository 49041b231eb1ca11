"""The server URL, checked once at `init()` (a bad URL turns monitoring off with one clear line). Several servers
may be named, comma-separated (`RL_INSIGHT_SERVER_URL=http://a:18080,http://b:18080`): the process sticks to one and
moves to the next when it fails (client/transport.py `FailoverTransport`)."""

from __future__ import annotations


class ServerUrl:
    __slots__ = ("text", "https", "host", "port", "prefix")

    def __init__(self, text: str, https: bool, host: str, port: int, prefix: str) -> None:
        self.text = text
        self.https = https
        self.host = host
        self.port = port
        self.prefix = prefix

    def __str__(self) -> str:
        return self.text


def parse_server_url(url: str) -> ServerUrl:
    """`http(s)://host[:port][/prefix]` (a bare `host:port` means http). ValueError names what is wrong."""
    from urllib.parse import urlsplit  # lazy: only processes that enable monitoring pay for it

    raw = url.strip()
    if "://" not in raw and raw.split("/", 1)[0].endswith(":"):  # "http:" (e.g. "http://" with the slashes stripped)
        raise ValueError(f"RL-Insight server URL {url!r} has no host; expected http://host:port")
    try:
        parts = urlsplit(raw if "://" in raw else "http://" + raw)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"RL-Insight server URL {url!r} is not valid ({exc}); expected http://host:port") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"RL-Insight server URL {url!r} uses scheme {parts.scheme!r}; expected http://host:port or https://…")
    if not parts.hostname:
        raise ValueError(f"RL-Insight server URL {url!r} has no host; expected http://host:port")
    https = parts.scheme == "https"
    text = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}"
    return ServerUrl(text, https, parts.hostname, port or (443 if https else 80), parts.path.rstrip("/"))


def parse_server_urls(text: str) -> list[ServerUrl]:
    """Every URL of a comma-separated list (at least one; duplicates once, in order). ValueError names a bad one."""
    out: dict[str, ServerUrl] = {}
    for part in text.split(","):
        if part.strip():
            url = parse_server_url(part)
            out.setdefault(url.text, url)
    if not out:
        raise ValueError(f"RL-Insight server URL {text!r} names no server; expected http://host:port")
    return list(out.values())
