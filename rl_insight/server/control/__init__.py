"""The control plane: requests to chosen processes of a run, delivered on its ingest replies, answered and kept.

One folder per kind (`profiles/`, `stacks/`), each with a book that has `open_requests(project, experiment_name)`;
`run_control.py` lists every kind's open requests on each reply. A new kind is a request class in `protocol/` with
its entry in `protocol/control.CONTROL_KINDS`, a folder here, and its entry in `AppState`'s builder.
"""
