"""The stacks room: the book of snapshot requests and answers (book.py), the answers grouped by where the threads
are (groups.py), the verdict (verdict.py, one rule per class in verdict_classes.py), the stall watch that asks for
one when a lane stops moving (stall_watch.py); its routes (routes.py) and its Room (feature.py)."""
