"""Child processes: spawn in their own process group, wait for readiness, identify, stop.

A pid counts as ours only if the process is alive *and* its command line contains the marker we
recorded, so a stale pid file never makes us signal an unrelated process that reused the pid.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

LOG_ROTATE_BYTES = 50 * 1024 * 1024


def cmdline(pid: int) -> str | None:
    """The process's command line, or None if it does not exist (Linux /proc, else `ps`)."""
    proc = Path(f"/proc/{pid}/cmdline")
    if proc.parent.exists():
        try:
            return proc.read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            return None
    try:
        out = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def is_ours(pid: int | None, marker: str) -> bool:
    if not pid or pid <= 0 or not is_alive(pid):
        return False
    line = cmdline(pid)
    return line is not None and marker in line


def open_log(path: Path):  # returns a binary file object
    """Append to a log file, rotating it once (to `.1`) when it grew past 50 MiB."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if path.stat().st_size > LOG_ROTATE_BYTES:
            os.replace(path, path.with_name(path.name + ".1"))
    except FileNotFoundError:
        pass
    # logs can hold URLs, targets and tracebacks with run data: readable by this user only
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.chmod(path, 0o600)
    return os.fdopen(fd, "ab", buffering=0)


def rotate_if_large(path: Path, limit: int = LOG_ROTATE_BYTES) -> bool:
    """copytruncate (as logrotate does): the running child keeps its O_APPEND descriptor and writes on
    at the start of the emptied file; the old content is kept as `<log>.1`."""
    try:
        if path.stat().st_size <= limit:
            return False
        import shutil

        shutil.copyfile(path, path.with_name(path.name + ".1"))
        os.chmod(path.with_name(path.name + ".1"), 0o600)
        with open(path, "r+b") as f:
            f.truncate(0)
        return True
    except OSError:
        return False


def spawn(argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a child in a new session (its own process group), stdout+stderr appended to its log."""
    log = open_log(log_path)
    log.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(argv)}\n".encode())
    try:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env, close_fds=True)
    finally:
        log.close()


def wait_ready(url: str, timeout: float, proc: subprocess.Popen | None = None) -> bool:
    """Poll `url` until it answers 200; False on timeout or when `proc` exits first."""
    import httpx  # lazily: the CLI imports this module for every command

    from ..tls import verified

    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=1.0, trust_env=False, verify=verified()) as client:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                return False
            try:
                if client.get(url).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
    return False


def terminate(pid: int, marker: str, timeout: float = 10.0) -> str:
    """SIGTERM the process group, then SIGKILL after `timeout`. Returns what happened."""
    if not is_ours(pid, marker):
        return "not running"
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return "not running"
    # Signal the group only if the process leads it (we started it with a new session); never our own group.
    target_group = pgid == pid and pgid != os.getpgid(0)
    _signal(pid, pgid, target_group, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return "stopped"
        _reap(pid)
        time.sleep(0.05)
    _signal(pid, pgid, target_group, signal.SIGKILL)
    for _ in range(100):
        _reap(pid)
        if not is_alive(pid):
            break
        time.sleep(0.05)
    return "killed"


def _signal(pid: int, pgid: int, group: bool, sig: signal.Signals) -> None:
    try:
        if group:
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
