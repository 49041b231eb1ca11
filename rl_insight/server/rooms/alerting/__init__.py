"""The alerting room: receivers (one module per kind, `kinds/`), the Alertmanager configuration made from them and
its API, silences, webhooks relayed by the server, and the server's own alerts (a stalled, hung or lost run) posted to
Alertmanager; its routes (`routes.py`) and its Room (`feature.py`)."""
