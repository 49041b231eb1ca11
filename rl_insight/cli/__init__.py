"""The `rl-insight` command line (typer): each command in a module of its own, registered in main.py."""
