"""The trajectories room: a run's agent-loop trajectories per step — the table, the distributions, one trajectory's
waterfall of turns — over HTTP (routes.py); its Room (feature.py). What it reads is the run store's trajectories kind
(`runstore/trajectories/`: the index the writer keeps from the spans, and its queries)."""
