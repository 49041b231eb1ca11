"""One exception tree for the server, services and CLI.

Each error says what was expected, what was found, where, and the next step. HTTP status codes
are mapped in one place (`server/app.py`) and CLI exit codes in one place (`cli/main.py`).
"""

from __future__ import annotations


class RLInsightError(Exception):
    """Base class. `http_status` and `exit_code` are the defaults for the two mappings."""

    http_status = 500
    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class InvalidInputError(RLInsightError):
    """A request or file that does not have the expected shape."""

    http_status = 422
    exit_code = 2


class MalformedBodyError(InvalidInputError):
    """Body that cannot even be decoded (bad gzip, not JSON)."""

    http_status = 400


class BadRequestError(InvalidInputError):
    """Invalid input answered with 400, where upstream RL-Insight does (target registration)."""

    http_status = 400


class PayloadTooLargeError(InvalidInputError):
    http_status = 413


class ConflictError(RLInsightError):
    """The request conflicts with the current state (e.g. registering into an archived experiment)."""

    http_status = 409
    exit_code = 2


class UnauthorizedError(RLInsightError):
    http_status = 401
    exit_code = 2


class ForbiddenError(RLInsightError):
    """A known principal whose role does not allow this (a viewer requesting a profile, an ingest token reading)."""

    http_status = 403
    exit_code = 2


class NotFoundError(RLInsightError):
    http_status = 404
    exit_code = 2


class BusyError(RLInsightError):
    """The server cannot take this now (too much in flight, the run store behind): send it again later.
    Answered 503 with `Retry-After`, which OTLP exporters and our client honour by resending."""

    http_status = 503

    def __init__(self, message: str, *, hint: str | None = None, retry_after_s: int = 1) -> None:
        super().__init__(message, hint=hint)
        self.retry_after_s = retry_after_s


class RateLimitedError(RLInsightError):
    """Too many attempts from one address (wrong sign-in tokens): answered 429 with `Retry-After`."""

    http_status = 429
    exit_code = 2

    def __init__(self, message: str, *, hint: str | None = None, retry_after_s: int = 60) -> None:
        super().__init__(message, hint=hint)
        self.retry_after_s = retry_after_s


class ConfigError(RLInsightError):
    """Invalid configuration (server config file, prometheus.yml rendering)."""

    exit_code = 2


class BinaryNotFoundError(RLInsightError):
    """A service binary is missing or too old."""

    exit_code = 2


class PortInUseError(RLInsightError):
    exit_code = 3


class ServiceError(RLInsightError):
    """A supervised service failed to start, become ready, or stop."""

    exit_code = 1


class StoreError(RLInsightError):
    """Persistent state (targets file, state file) that cannot be read or written."""

    exit_code = 1


class StoreUnavailableError(StoreError):
    """The run store's server cannot be reached now (PostgreSQL restarting, down, or refusing connections). Answered
    503 with `Retry-After`: what was asked can be asked again once it is back, and nothing stored was lost."""

    http_status = 503
    retry_after_s = 2


class MissingExtraError(RLInsightError):
    """An optional dependency (an extra such as `rl-insight[analysis]`, or Ray) is not installed."""

    exit_code = 2
