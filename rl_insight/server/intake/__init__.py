"""The intake pipeline: one path from a decoded batch to the live state, the run store and the exporters."""
