"""The browser fixtures every UI test module uses: one headless Chromium for the pass, a fresh context and page a
test. (Defined here only: a fixture defined in a test module and imported here too would be two session fixtures,
and Playwright's sync API refuses a second one in the same thread.)"""

import pytest

from tests.e2e.test_ui import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, _need_browser


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the whole browser pass (a launch a test was ~1 s of its setup and as much of its
    teardown); each test gets a context of its own (cookies, storage, cache), as a fresh browser would."""
    _need_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    ARTIFACTS.mkdir(exist_ok=True)
    # bypass_csp: the tests' own polling predicates are evaluated as strings; the UI under its real
    # CSP is checked by test_ui_and_docs_work_under_their_content_security_policy
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, bypass_csp=True)
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: print(f"console {m.type}: {m.text}"))  # (shown when a test fails)
    yield pg
    context.close()
    assert not errors, f"JavaScript errors: {errors}"
