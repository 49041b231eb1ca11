"""The live state of the server: the /metrics cache, clients, profiles, stack snapshots and the insight rounds."""
