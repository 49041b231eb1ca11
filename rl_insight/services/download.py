"""Downloads that hash while they stream, with a progress bar and errors that say what to do."""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Callable

import httpx

from ..errors import RLInsightError

Progress = Callable[[int, int | None], None]  # (bytes so far, total or None)


class DownloadError(RLInsightError):
    exit_code = 1


def fetch_text(url: str, timeout: float = 30.0) -> str:
    try:
        r = httpx.get(url, timeout=timeout, follow_redirects=True)
    except httpx.HTTPError as exc:
        raise DownloadError(
            f"cannot reach {url}: {exc}",
            hint="check the network or proxy, use --mirror, or install from a bundle with --local-archive",
        ) from None
    if r.status_code != 200:
        raise DownloadError(f"{url} answered HTTP {r.status_code}")
    return r.text


def download(url: str, dest: Path, progress: Progress | None = None, timeout: float = 60.0) -> str:
    """Stream `url` into `dest` (atomically) and return its sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    sha = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(prefix=".download-", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            try:
                with httpx.stream("GET", url, timeout=timeout, follow_redirects=True) as r:
                    if r.status_code != 200:
                        raise DownloadError(f"{url} answered HTTP {r.status_code}",
                                            hint="check the version and platform, or use --mirror / --local-archive")
                    total = int(r.headers["content-length"]) if r.headers.get("content-length", "").isdigit() else None
                    done = 0
                    for chunk in r.iter_bytes(1 << 20):
                        f.write(chunk)
                        sha.update(chunk)
                        done += len(chunk)
                        if progress:
                            progress(done, total)
            except httpx.HTTPError as exc:
                raise DownloadError(
                    f"download of {url} failed: {exc}",
                    hint="check the network or proxy, use --mirror, or carry a bundle in (--local-archive)",
                ) from None
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    raise DownloadError(f"disk full while writing {dest}", hint="free space or pass --install-dir "
                                                                                "elsewhere") from None
                raise
        os.replace(tmp, dest)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return sha.hexdigest()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def parse_checksums(text: str, asset: str, kind: str) -> str | None:
    """The sha256 of `asset` in a vendor checksum file (`sums` lines or a `single` digest)."""
    if kind == "single":
        word = text.strip().split()[0] if text.strip() else ""
        return word.lower() if len(word) == 64 else None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-1].lstrip("*").split("/")[-1] == asset and len(parts[0]) == 64:
            return parts[0].lower()
    return None
