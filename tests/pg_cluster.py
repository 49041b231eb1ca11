"""A throwaway PostgreSQL cluster for the tests: Debian's postgresql-15 binaries, `initdb` in a temp dir, one free
loopback port, password (SCRAM) authentication for a role the tests use, run as an unprivileged user (as root,
Debian's `postgres` account: PostgreSQL refuses to run as root). Stopped and removed by `stop()`."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.conftest import free_port, wait_until

ROLE = "rli"
PASSWORD = "rli-test-password"


def postgres_bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresCluster:
    def __init__(self, *, durable_commits: bool = False) -> None:
        """`durable_commits`: a commit is in the WAL before it returns (PostgreSQL's default; the tests' clusters
        turn it off for speed, and then a crash loses the last commits, which a crash test must not)."""
        bindir = postgres_bin_dir()
        if bindir is None:
            raise FileNotFoundError("initdb (postgresql-15) is not installed")
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="rli-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.root, "postgres")
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD)
        if self._as:
            shutil.chown(pwfile, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", ROLE, "--pwfile", str(pwfile), "--auth", "scram-sha-256",
                  "--locale", "C.UTF-8", "-E", "UTF8")
        with open(self.data / "postgresql.conf", "a") as f:
            f.write(f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\nunix_socket_directories = '{self.root}'\n"
                    "fsync = off\nfull_page_writes = off\nmax_connections = 200\n"
                    f"synchronous_commit = {'on' if durable_commits else 'off'}\n")
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "start")
        self._n = 0

    def _run(self, tool: str, *args: str) -> None:
        r = subprocess.run([*self._as, str(self.bindir / tool), *args], capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise RuntimeError(f"{tool} failed: {r.stdout}{r.stderr}")

    def url(self, database: str = "postgres") -> str:
        """The store URL, without the password (the tests pass it as RL_INSIGHT_STORE_PASSWORD)."""
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "t") -> str:
        import psycopg

        self._n += 1
        name = f"{prefix}{self._n}"
        with psycopg.connect(host="127.0.0.1", port=self.port, user=ROLE, password=PASSWORD, dbname="postgres",
                             autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return name

    def halt(self, mode: str = "fast") -> None:
        """Stop the server and leave the cluster for `resume`: `fast` is what `systemctl restart` does, `immediate`
        a crash (no shutdown checkpoint; the next start recovers from the WAL)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def resume(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "log"), "-w", "start")

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        shutil.rmtree(self.root, ignore_errors=True)

    def wait_ready(self) -> None:
        import psycopg

        def up() -> bool:
            try:
                psycopg.connect(host="127.0.0.1", port=self.port, user=ROLE, password=PASSWORD, dbname="postgres",
                                connect_timeout=2).close()
                return True
            except psycopg.OperationalError:
                return False

        wait_until(up, timeout=30, what="postgres to accept connections")
