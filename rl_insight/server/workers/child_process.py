"""A Python child process of the server that speaks pickled messages over two pipes.

The run store's writer (runstore/writer_process.py) and the insight rounds (live/insights/process.py) run in one, so
their Python work never takes the GIL of the process whose event loop answers a thousand clients (issue 24).

Server side: `PipeChild.start(module)` runs `python -m <module> FD_IN FD_OUT` as every child of ours starts
(rl_insight/child.py: the same code as the server); `send` and `receive` move one message each; `close` ends it,
killing it after the timeout. `relay_log` logs a child's ("log", …) message here under the child's logger name.

Child side: `ServerPipe.from_argv()` is its two ends; `send` is safe from any thread, `tell` also when the server is
gone; `PipeLog` sends the child's log records.

Invariants: the child's ends are closed here once it started, so the child reads EOF when the server ends (after a
SIGKILL too) and can end with it; messages arrive in the order they were sent.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import subprocess
import threading
from multiprocessing.connection import Connection
from typing import Callable

from ...child import python_command, python_env

_PICKLE = pickle.HIGHEST_PROTOCOL


class PipeChild:
    """One child process and the two pipes to it (the server's side)."""

    def __init__(self, proc: subprocess.Popen, to_child: Connection, from_child: Connection) -> None:
        self.proc, self.to_child, self.from_child = proc, to_child, from_child
        self._send_lock = threading.Lock()

    @classmethod
    def start(cls, module: str) -> PipeChild:
        """`python -m module FD_IN FD_OUT`; OSError when it cannot be started."""
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        try:
            proc = subprocess.Popen(python_command(module, str(to_r), str(from_w)), pass_fds=(to_r, from_w),
                                    stdin=subprocess.DEVNULL, env=python_env())
        except OSError:
            for fd in (to_w, from_r):
                os.close(fd)
            raise
        finally:
            for fd in (to_r, from_w):  # the child's ends
                os.close(fd)
        return cls(proc, Connection(to_w, readable=False), Connection(from_r, writable=False))

    def send(self, msg: tuple) -> None:
        data = pickle.dumps(msg, _PICKLE)
        with self._send_lock:
            self.to_child.send_bytes(data)

    def poll(self, timeout: float) -> bool:
        return self.from_child.poll(timeout)

    def receive(self) -> tuple:
        return pickle.loads(self.from_child.recv_bytes())

    def close(self, timeout: float) -> int | None:
        """Close both pipes (the child reads EOF) and wait for it; killed after `timeout`. Its exit code."""
        for c in (self.to_child, self.from_child):
            try:
                c.close()
            except OSError:
                pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)


def relay_log(msg: tuple) -> None:
    """A child's ("log", logger name, level, text), logged here."""
    _, name, level, text = msg
    logging.getLogger(name).log(level, "%s", text)


class ServerPipe:
    """The child's two ends. A child lives exactly as long as its pipe: it ignores SIGINT and SIGTERM, which reach it
    with the server's whole process group (Ctrl+C in a terminal, `rl-insight server stop`), so the server ends it in
    order (the writer commits what it holds, then reads EOF) instead of finding it dead and starting another while it
    shuts down (which cost every stop 10 s and a SIGKILL of the server). A SIGKILL still ends it; so does the
    server's end, by EOF."""

    def __init__(self, fd_in: int, fd_out: int) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.inp, self.out = Connection(fd_in, writable=False), Connection(fd_out, readable=False)
        self._lock = threading.Lock()

    @classmethod
    def from_argv(cls, argv: list[str]) -> ServerPipe:
        return cls(int(argv[1]), int(argv[2]))

    def receive(self) -> tuple:
        """The next message; EOFError once the server ended."""
        return pickle.loads(self.inp.recv_bytes())

    def waiting(self) -> bool:
        return self.inp.poll(0)

    def send(self, msg: tuple) -> None:
        data = pickle.dumps(msg, _PICKLE)
        with self._lock:
            self.out.send_bytes(data)

    def tell(self, msg: tuple) -> None:
        """`send`, for threads that may outlive the server: a closed pipe is nothing to report."""
        try:
            self.send(msg)
        except (OSError, ValueError):
            pass

    def log_to_server(self, level: int) -> None:
        """Every log record of the child, from now on, to the server's log."""
        root = logging.getLogger()
        root.addHandler(PipeLog(self.send))
        root.setLevel(level)


class PipeLog(logging.Handler):
    """The child's log records, to the server's log."""

    def __init__(self, send: Callable[[tuple], None]) -> None:
        super().__init__()
        self._send = send

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
            if record.exc_info:
                text += "\n" + logging.Formatter().formatException(record.exc_info)
            self._send(("log", record.name, record.levelno, text))
        except Exception:  # the server is gone: nothing to tell
            pass
