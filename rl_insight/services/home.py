"""The rl-insight home directory (`~/.rl-insight` or `RL_INSIGHT_HOME`) and its layout."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .. import env
from ..fsutil import private_dir


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def resolve(cls, explicit: str | Path | None = None) -> "Home":
        raw = explicit or env.get(env.HOME) or "~/.rl-insight"
        return cls(Path(raw).expanduser().resolve())

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def state_file(self) -> Path:
        return self.run_dir / "stack.json"

    @property
    def runtime_dir(self) -> Path:
        return self.root / "runtime"

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def install_dir(self) -> Path:
        return self.root / "services"

    @property
    def token_file(self) -> Path:
        return self.root / "token"

    def ensure(self) -> None:
        # the home holds the token, the run store and logs: this user only. Its own folders always; the home itself
        # when made here (`--home` naming a folder that exists, e.g. /tmp, leaves that folder's mode to its owner)
        private_dir(self.root)
        for d in (self.run_dir, self.runtime_dir, self.data_dir, self.logs_dir):
            d.mkdir(parents=True, exist_ok=True)
        for d in (self.data_dir, self.logs_dir, self.run_dir):
            try:
                os.chmod(d, 0o700)
            except PermissionError:
                pass

    def read_token(self) -> str:
        try:
            return self.token_file.read_text().strip()
        except FileNotFoundError:
            return ""

    def running_token(self) -> str:
        """The token of the server this home runs (its runtime config, 0600), which may have been given
        with --token instead of generated; else the stored token."""
        try:
            import json

            tok = json.loads((self.runtime_dir / "server.json").read_text()).get("token") or ""
        except (OSError, ValueError, AttributeError):
            tok = ""
        return str(tok) or self.read_token()

    def ensure_token(self) -> str:
        """Reuse the stored token, or create one readable only by this user (mode 0600)."""
        token = self.read_token()
        if token:
            return token
        import secrets  # (only a new token needs it)

        token = secrets.token_urlsafe(24)
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
        return token
