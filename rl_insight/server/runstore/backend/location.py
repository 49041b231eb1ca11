"""Where the run store lives: a SQLite file (the embedded default, `<data_dir>/runstore.sqlite`) or a PostgreSQL
database named by a URL (`server start --store postgresql://user@host:port/db`, the key `store` in the config
file, `RL_INSIGHT_STORE_URL` in the environment).

Invariant: a password never travels in the URL. A URL that carries one is refused with where to put it instead
(`RL_INSIGHT_STORE_PASSWORD`, libpq's `PGPASSWORD`, `~/.pgpass`, or `?passfile=FILE`), so it can never appear on a
command line, in `server.json`, in logs or in `/healthz`; `display` is what any of those may show.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from .... import env as _env
from ....errors import ConfigError

PASSWORD_ENV = _env.STORE_PASSWORD
STORE_URL_ENV = _env.STORE_URL
POSTGRES_SCHEMES = ("postgresql", "postgres")
# libpq parameters a store URL may carry (the rest, e.g. `password`, are refused)
ALLOWED_PARAMS = {"sslmode", "sslrootcert", "sslcert", "sslkey", "passfile", "connect_timeout", "application_name",
                  "target_session_attrs", "options"}
WHERE_PASSWORDS_GO = (f"put it in {PASSWORD_ENV} (or libpq's PGPASSWORD), in ~/.pgpass, or in a file named by "
                      "?passfile=FILE")


@dataclass(frozen=True)
class StoreLocation:
    kind: str  # "sqlite", "postgresql" or "memory" (backend/memory.py)
    path: Path | None = None  # the SQLite file
    url: str | None = None  # the PostgreSQL URL, without a password; memory://NAME

    @property
    def display(self) -> str:
        """What logs, state files and /healthz may show."""
        return str(self.path) if self.kind == "sqlite" else str(self.url)

    def conninfo(self) -> tuple[str, dict[str, str]]:
        """The URL and the keyword arguments psycopg connects with (the password from the environment, if set)."""
        extra = {"password": os.environ[PASSWORD_ENV]} if os.environ.get(PASSWORD_ENV) else {}
        return str(self.url), extra


def sqlite_location(path: Path | str) -> StoreLocation:
    return StoreLocation("sqlite", path=Path(path))


def existing_store(value: str | None, data_dir: Path) -> StoreLocation:
    """A store a command reads (`export --store`, `server migrate --from`): a plain path is a SQLite file, anything
    else as `parse_store` reads it. A SQLite file that does not exist raises FileNotFoundError (the caller says
    which option named it)."""
    where = sqlite_location(Path(value).expanduser()) if value and "://" not in value else parse_store(value, data_dir)
    if where.path is not None and not where.path.exists():
        raise FileNotFoundError(where.path)
    return where


def _refuse_bad_parameters(query: str) -> None:
    params = dict(parse_qsl(query, keep_blank_values=True))
    if "password" in params:
        raise ConfigError("the store URL carries a password parameter", hint=WHERE_PASSWORDS_GO)
    unknown = sorted(set(params) - ALLOWED_PARAMS)
    if unknown:
        named = [k[:40] for k in unknown if k.replace("_", "").isalnum()]  # (a key, never a value, and only a name)
        raise ConfigError(f"the store URL has unknown parameters {named or '(unreadable)'}",
                          hint=f"allowed: {', '.join(sorted(ALLOWED_PARAMS))}")


def parse_store(value: str | None, data_dir: Path) -> StoreLocation:
    """`value` (a URL, a `sqlite:///FILE` URL, or empty for the default file under `data_dir`) as a location;
    ConfigError naming the problem otherwise."""
    if not value:
        return sqlite_location(data_dir / "runstore.sqlite")
    if value.startswith("sqlite:///"):
        return sqlite_location(Path(value[len("sqlite://"):]).expanduser())
    # No error below quotes a part of the URL: a password written into it with an unescaped `/`, `#` or `?` is split
    # into the "port", the path, the query or the fragment, and would be echoed there.
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        raise ConfigError("store URL is not a valid URL (its host or port cannot be read; a password written into "
                          "the URL would also do this)",
                          hint="e.g. postgresql://rl@db.example:5432/rl_insight or sqlite:///path/runstore.sqlite; "
                               + WHERE_PASSWORDS_GO) from None
    if "@" in parts.path or "@" in parts.query or "@" in parts.fragment or parts.fragment:
        raise ConfigError("the store URL has text after its host that looks like part of a password (an `@` after "
                          "the host, or a `#`)", hint=WHERE_PASSWORDS_GO)
    if parts.scheme not in POSTGRES_SCHEMES:
        raise ConfigError(f"store URL scheme {parts.scheme or '(none)'!r} is not supported",
                          hint="use postgresql://user@host:port/database, or sqlite:///FILE (the default is a "
                               "SQLite file under --data-dir)")
    if parts.password is not None:
        raise ConfigError("the store URL carries a password, which would show on command lines and in state files",
                          hint=WHERE_PASSWORDS_GO)
    _refuse_bad_parameters(parts.query)
    if not parts.hostname:
        raise ConfigError("the store URL names no host", hint="postgresql://user@host:port/database")
    database = parts.path.lstrip("/")
    if not database or "/" in database:
        raise ConfigError("the store URL names no single database (its path must be one name after the host)",
                          hint="postgresql://user@host:port/database")
    if port is not None and not 0 < port < 65536:
        raise ConfigError(f"the store URL's port {port} is out of range")
    return StoreLocation("postgresql", url=value.replace("postgres://", "postgresql://", 1))
