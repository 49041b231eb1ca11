"""The profiles room: the book of requests and what each process reported (book.py), kept in files (files.py) or in
the fleet's shared records (shared.py), the analysis of the uploaded traces (analysis.py); its routes (routes.py)
and its Room (feature.py)."""
