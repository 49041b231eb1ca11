"""Notifications through Alertmanager: receivers, the configuration made from them, and the alerts the server posts."""
