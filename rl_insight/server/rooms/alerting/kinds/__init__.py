"""Receiver kinds, one module each (webhook, slack, email): found here, not wired — a module of this package with a
`KIND` is a kind. The API's model and checks (receivers.py, rooms/alerting/routes.py), Alertmanager's configuration
(am_config.py), the relay (delivery.py) and `rl-insight alerts receivers add` (cli/alerts.py) all read `KINDS`.

Invariant: adding a kind is adding its module (its fields, checks, Alertmanager entry and how it is shown); nothing
else names the kinds. Stdlib only."""

from __future__ import annotations

import importlib
import pkgutil

from .base import Field, Receiver, ReceiverKind


def _found() -> dict[str, ReceiverKind]:
    kinds = []
    for info in pkgutil.iter_modules(__path__):
        if info.name != "base":
            kind = getattr(importlib.import_module(f"{__name__}.{info.name}"), "KIND", None)
            if isinstance(kind, ReceiverKind):
                kinds.append(kind)
    return {k.name: k for k in sorted(kinds, key=lambda k: (k.order, k.name))}


KINDS: dict[str, ReceiverKind] = _found()


def fields() -> list[Field]:
    """Every kind's fields, once per key (the first kind's description), in the kinds' order."""
    seen: dict[str, Field] = {}
    for kind in KINDS.values():
        for f in kind.fields:
            seen.setdefault(f.key, f)
    return list(seen.values())


__all__ = ["KINDS", "Field", "Receiver", "ReceiverKind", "fields"]
