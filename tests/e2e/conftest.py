"""The browser fixture every UI test module uses (defined with the first suite, shared from here)."""

from tests.e2e.test_ui import page  # noqa: F401 - a pytest fixture, found by name
