"""`rl-insight demo`: a simulated verl job (driver, rollout and trainer workers, stand-in exporters)."""
