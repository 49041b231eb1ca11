"""Install, configure and supervise Prometheus (and later Tempo and Grafana) next to the ingest server."""
