"""The exports room: the live exporters that send each run's trainer scalars and insight metrics to TensorBoard and
W&B while the job runs (exporters.py), the insight points read back from the run store for them and for
`rl-insight export` (run_points.py), and its Room (feature.py)."""
