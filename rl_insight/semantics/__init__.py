"""What the numbers mean in RL terms, pure and shared: the server, the offline analysis and the dashboards read the
same definitions (insights, a step's critical path, run diffs, MoE load, lane order and colours, the panel and
exporter-metric catalogues, Perfetto's format, Prometheus names). Stdlib only, no I/O; nothing here imports the server,
the client or the analysis stack."""
