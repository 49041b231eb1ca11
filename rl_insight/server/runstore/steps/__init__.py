"""Per-step facts of a run: the insights kept per step (step_stats.py), a window's insights from them
(run_insights.py), a step's critical path and run diffs (explain.py)."""
