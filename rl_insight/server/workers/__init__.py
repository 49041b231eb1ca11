"""The server's background machinery, written once: the bounded batch worker and periodic service every background
thread is (batch_worker.py), and the Python child process that speaks pickled messages over pipes (child_process.py:
the run store's writer, the insight rounds)."""
