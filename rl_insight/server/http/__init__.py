"""The HTTP machinery under the routes: the hot ingest route, middleware, the request guards and bodies."""
