"""What leaves the server: the OTLP forwarder, the TensorBoard / W&B exporters, and alerts to Alertmanager."""
