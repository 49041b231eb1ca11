"""What leaves the server by itself: the OTLP forwarder to Tempo (exports and alerts are rooms: server/rooms/)."""
