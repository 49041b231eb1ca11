"""Ingest server: FastAPI app factory, ingest, /metrics exposition, target registry."""
