"""The kernel's HTTP routes, one router per concern (ingest, OTLP, runs, spans, panels, session, tokens, ...);
`create_app` mounts them, then the rooms' (server/rooms/). Each declares its access where it is registered."""
