"""Renderers: the event table and analyzer results -> HTML, PNG, Perfetto JSON, CSV/Parquet, summary."""
