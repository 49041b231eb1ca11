"""The control plane's kernel: requests to chosen processes of a run, delivered on its ingest replies.

`run_control.py` lists every kind's open requests on each reply, from the book each kind's room adds
(`server/rooms/profiles/`, `server/rooms/stacks/`); `processes.py` picks the processes a selector names. A new kind
is a request class in `protocol/` with its entry in `protocol/reply.CONTROL_KINDS`, and a room that adds its book.
"""
