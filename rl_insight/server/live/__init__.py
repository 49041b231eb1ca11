"""The live state of the server: the /metrics cache, clients, the step clock, the run conditions and the insight
rounds."""
