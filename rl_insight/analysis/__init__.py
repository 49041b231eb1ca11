"""Offline analysis: profiler traces and verl logs -> one event table -> analyzers -> renderers.

Needs the `analysis` extra (`pip install "rl-insight[analysis]"`): numpy, pandas, matplotlib, msgspec.
Library code never configures logging; problems are reported through `Report`.
"""
