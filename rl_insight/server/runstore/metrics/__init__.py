"""Metric series as the writer keeps them (series_totals.py: counts and last steps; series_parts.py: counters summed
across processes) and as charts read them (downsample.py)."""
