"""Spans read back: the timeline's window of merged spans per lane (timeline.py) and its level-of-detail summary,
kept by the writer (span_lod.py)."""
