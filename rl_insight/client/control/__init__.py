"""What a process does about the control requests riding on its ingest replies: who it is (`this_process.py`, the
identity every kind selects by) and one folder per kind (`profiles/`, `stacks/`), each offered every reply."""
