"""What every route module builds on: the bounded body, routers joined without a rebuild, the documented answer and
error types, run-id parameters, and the change answers' types."""
