"""Agent-loop trajectories: what a finished span says (facts.py), the writer's index of them (index.py), and the reads
of a step's trajectories and one trajectory's waterfall (queries.py)."""
