"""Profiles on demand: the book of requests and what each process reported (book.py), kept in files (files.py) or in
the fleet's shared records (shared.py), and the analysis of the uploaded traces (analysis.py)."""
