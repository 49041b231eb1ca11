"""Training-side client: stdlib only, imported by `import rl_insight`."""
