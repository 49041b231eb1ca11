"""The explain room: a step's critical path with its what-ifs, a window of steps explained, the goodput ledger and
two runs (or two windows) compared, over HTTP (routes.py); its Room (feature.py). What it reads is the run store's
steps kind (`runstore/steps/`: per-step rows, `explain.py`, `ledger.py`) over the pure semantics."""
