"""The run store: runs, step-aligned metric samples, spans and what is derived from them, in one database chosen once
(backend/: a SQLite file, the default, or PostgreSQL). The writer (writer.py, or writer_process.py in a child
process) is the only code that writes; readers take a connection per thread (reader.py); the folders beside them are
the read models by feature (spans, steps, trajectories, metrics, fleet) and queries.py the shared reads.

Nothing is imported here: a module that needs one part (the server's config reads retention.py's defaults) does not
load the writer."""
