"""The fleet's tables: which server each client process reports to (clients.py) and the records servers share
(records.py)."""
