"""Prometheus: the panels and alerts of a run, its HTTP API client, scrape targets and their file_sd."""
