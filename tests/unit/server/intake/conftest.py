"""Intake tests that wait on a real run store take the store's own fixture: SQLite and PostgreSQL."""

from tests.unit.server.runstore.conftest import store_at  # noqa: F401  # (a fixture: pytest finds it by name)
