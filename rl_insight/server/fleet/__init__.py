"""Several ingest servers on one PostgreSQL store (docs/scale.md): the lease that runs background work once per
fleet (`lease.py`), the registry of which server each client process reports to (`registry.py`), and the loop that
keeps both and tidies after servers and clients that are gone (`coordinator.py`). With a SQLite store there is one
server, and none of this runs."""
