"""The server's rooms: one folder per feature (`alerting/`, `explain/`, `exports/`, `findings/`, `profiles/`,
`stacks/`, `trajectories/`), holding its services, its records, its routes (each declaring its access where it is
registered) and a `feature.py` that says what the room is as one `Room` (house.py): its name, how it assembles its
parts on the kernel (`AppState`), its routes, the rooms it uses and its CLI commands. The app finds the rooms here
(`house.discover`), assembles them on the kernel (`house.furnish`) and mounts their routes; no list of them is
written anywhere.

Invariants: a room is a sub-package of this one with a `feature.py` whose `FEATURE` is a `Room` of the folder's name;
rooms are assembled after the kernel, each after the rooms its `after` names (a name no room has, or a cycle, is
refused by name at start); a room adds what runs to the kernel's Lifecycle where it makes it, so rooms start after
the kernel and stop before it; a room imports another room only where its `after` names it (an import-linter
contract in pyproject.toml); once furnished, every kind of control request has its book (`RunControlBuilder.missing`).
"""
