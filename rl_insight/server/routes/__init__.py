"""HTTP routes, one router per concern; `create_app` includes them (auth is router-level)."""
