"""The live insights: one round's computation (rounds.py), run in a child process (process.py) or on a thread,
scheduled and exposed on /metrics (service.py)."""
