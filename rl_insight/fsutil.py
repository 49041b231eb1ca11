"""Atomic file writes: temp file in the same directory, fsync, `os.replace`; private folders.

Readers (Prometheus watching a file_sd file, `server status` reading the state file) see the old
or the new content, never a half-written file. `private_dir` makes a folder this user's only when it
makes it: a folder that exists (a user's `--data-dir /tmp`) keeps the mode its owner gave it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes | str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def private_dir(path: Path) -> None:
    """Make `path` (and its parents) if it does not exist, the folder itself 0700 whatever the umask; a folder that
    exists is left as it is (its files carry their own modes)."""
    if not path.is_dir():
        path.mkdir(parents=True, exist_ok=True)
        os.chmod(path, 0o700)
