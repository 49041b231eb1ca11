"""Stack snapshot requests in this process: every thread's stack, answered from the sender thread."""
