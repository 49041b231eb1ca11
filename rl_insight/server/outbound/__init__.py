"""What leaves the server: the OTLP forwarder and the TensorBoard / W&B exporters (alerts: the alerting room)."""
