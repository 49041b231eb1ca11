"""Stack snapshots: the book of requests and answers (book.py), the answers grouped by where the threads are
(groups.py), and the stall watch that asks for one when a lane stops moving (stall_watch.py)."""
