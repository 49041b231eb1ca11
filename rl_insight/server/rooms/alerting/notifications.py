"""Notifications as one feature of the server: the receivers, the Alertmanager configuration made from them, and the
Alertmanager that delivers.

A receiver change (`add`, `remove`) is all or nothing: the new configuration is checked with `amtool check-config`
(where amtool is found) and then by Alertmanager itself (`/-/reload`); when either refuses it, the files are put
back as they were (and Alertmanager reloaded onto them), and the refusal's reason is the error. When Alertmanager is
not running the change is kept and said to apply at its next start.

Invariants: changes are serialized (one lock); `receivers.json` and `alertmanager.yml` (both 0600) change together;
nothing returned here carries a secret (receivers.shown).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Optional, cast

from typing_extensions import TypedDict

from ....errors import ConflictError, InvalidInputError, NotFoundError
from ....fsutil import atomic_write
from . import am_config
from .alertmanager import Alertmanager, AlertmanagerDown, AlertmanagerError, rfc3339
from .receivers import MAX_RECEIVERS, Receiver, ReceiverFile, ShownReceiver, shown, validate

MAX_SILENCE_S = 30 * 86400
MAX_KEPT_SILENCES = 1000  # silences set through this server that it puts back when Alertmanager lost them
OFF_HINT = ("off: no Alertmanager runs with this server. Install it (`apt-get install "
            "prometheus-alertmanager` or `rl-insight server install`) and restart with `rl-insight server start`; "
            "docs/alerts.md")


class NotificationStatus(TypedDict):
    """Whether notifications can be delivered, through which Alertmanager, and to how many receivers."""

    enabled: bool
    alertmanager_url: Optional[str]
    ready: bool
    receivers: int
    message: str


class Silence(TypedDict):
    """A silence: the labels it matches (a run's project and experiment_name, maybe an alert name), who set it and
    why, from when until when (RFC 3339), and whether it is active or pending."""

    id: str
    state: str
    matchers: dict[str, str]
    created_by: str
    comment: str
    starts_at: str
    ends_at: str


class ChangeResult(TypedDict):
    """What a receiver change did: the receivers now, and whether Alertmanager runs with them already."""

    receivers: list[ShownReceiver]
    applied: bool  # Alertmanager reloaded onto them (False: it is not running; it reads them at its next start)
    message: str


def silences_path(data_dir: Path) -> Path:
    return Path(data_dir).expanduser() / "alerting" / "silences.json"


def config_paths(data_dir: Path) -> tuple[Path, Path]:
    """(receivers.json, alertmanager.yml) of a data directory: the server and `server start` agree on them."""
    d = Path(data_dir).expanduser() / "alerting"
    return d / "receivers.json", d / "alertmanager.yml"


def _wire(s: Silence) -> dict[str, Any]:
    """A silence as Alertmanager's API takes it."""
    return {"matchers": [{"name": k, "value": v, "isRegex": False, "isEqual": True} for k, v in s["matchers"].items()],
            "startsAt": s["starts_at"], "endsAt": s["ends_at"], "createdBy": s["created_by"], "comment": s["comment"]}


def relay_of(data_dir: Path, server_url: str, token: str) -> am_config.Relay:
    """How Alertmanager reaches this server's delivery route: its URL and, when it has a token, a 0600 file with it
    (Alertmanager reads it at each delivery; never in its configuration)."""
    if not token:
        return am_config.Relay(server_url)
    path = Path(data_dir).expanduser() / "alerting" / "relay_token"
    atomic_write(path, token + "\n", mode=0o600)
    return am_config.Relay(server_url, str(path))


def write_config(data_dir: Path, grouping: am_config.Grouping, relay: am_config.Relay) -> Path:
    """(`server start`, before Alertmanager starts) alertmanager.yml rendered from the stored receivers."""
    receivers_path, config_path = config_paths(data_dir)
    atomic_write(config_path, am_config.render(ReceiverFile(receivers_path).load(), grouping, relay), mode=0o600)
    return config_path


class Notifications:
    def __init__(self, data_dir: Path, alertmanager_url: str | None, grouping: am_config.Grouping,
                 amtool: str | None = None, relay: am_config.Relay | None = None) -> None:
        receivers_path, self.config_path = config_paths(data_dir)
        self.silences_file = silences_path(data_dir)
        self.grouping = grouping
        self.relay = relay
        self.file = ReceiverFile(receivers_path)
        self.am = Alertmanager(alertmanager_url) if alertmanager_url else None
        self.amtool = amtool or shutil.which("amtool")
        self._lock = threading.Lock()

    def close(self) -> None:
        if self.am is not None:
            self.am.close()

    def status(self) -> NotificationStatus:
        n = len(self.file.load())
        if self.am is None:
            return {"enabled": False, "alertmanager_url": None, "ready": False, "receivers": n, "message": OFF_HINT}
        ready = self.am.ready()
        if not ready:
            msg = (f"Alertmanager at {self.am.url} does not answer: notifications wait for it "
                   "(`rl-insight server status`)")
        elif n == 0:
            msg = "on, but no receiver is set: add one with `rl-insight alerts receivers add` (docs/alerts.md)"
        else:
            msg = f"on: {n} receiver{'s' if n != 1 else ''}"
        return {"enabled": True, "alertmanager_url": self.am.url, "ready": ready, "receivers": n, "message": msg}

    def receivers(self) -> list[ShownReceiver]:
        return [shown(r) for r in self.file.load()]

    def receiver(self, name: str) -> Receiver | None:
        """One receiver as stored, secrets included (for delivery only: never an answer)."""
        return next((r for r in self.file.load() if r["name"] == name), None)

    def add(self, body: Any, replace: bool = False) -> ChangeResult:
        new = validate(body)
        with self._lock:
            current = self.file.load()
            same = [r for r in current if r["name"] == new["name"]]
            if same and not replace:
                raise ConflictError(f"a receiver named {new['name']!r} exists",
                                    hint="remove it first, or add with replace (`--replace`)")
            if not same and len(current) >= MAX_RECEIVERS:
                raise InvalidInputError(f"at most {MAX_RECEIVERS} receivers")
            return self._change([r for r in current if r["name"] != new["name"]] + [new])

    def remove(self, name: str) -> ChangeResult:
        with self._lock:
            current = self.file.load()
            if not any(r["name"] == name for r in current):
                raise NotFoundError(f"no receiver named {name[:80]!r}",
                                    hint=f"there are: {', '.join(r['name'] for r in current) or 'none'}")
            return self._change([r for r in current if r["name"] != name])

    def test(self, name: str, public_url: str) -> str:
        """A test notification to this receiver alone (am_config: *Tests*); what was sent, in words."""
        receiver = next((r for r in self.file.load() if r["name"] == name), None)
        if receiver is None:
            raise NotFoundError(f"no receiver named {name[:80]!r}")
        am = self._require_am()
        now = time.time()
        am.post_alerts([{
            "labels": {"alertname": "RLInsightTestNotification", "severity": "info", am_config.TEST_LABEL: name,
                       "project": receiver.get("project") or "rl-insight", "experiment_name": "test",
                       "test_id": f"{now:.3f}"},
            "annotations": {"summary": f"A test notification from rl-insight to the receiver {name!r}.",
                            "what_to_check": "Nothing: it arrived, so this receiver works.", "url": public_url},
            "startsAt": rfc3339(now), "endsAt": rfc3339(now + 300)}])
        return f"a test notification was handed to Alertmanager for {name!r}; it delivers within seconds"

    # ------------------------------------------------------------------ silences (kept by Alertmanager)
    def silences(self, run: tuple[str, str] | None = None) -> list[Silence]:
        """Active and pending silences (expired ones are Alertmanager's history), those of one run when asked."""
        am = self._require_am()
        out: list[Silence] = []
        for raw in am.silences():
            state = (raw.get("status") or {}).get("state")
            if state not in ("active", "pending"):
                continue
            matchers = {m.get("name"): m.get("value") for m in raw.get("matchers") or [] if m.get("isEqual", True)
                        and not m.get("isRegex")}
            if run is not None and (matchers.get("project") != run[0] or
                                    matchers.get("experiment_name", run[1]) != run[1]):
                continue
            out.append({"id": str(raw.get("id")), "state": state, "matchers": {str(k): str(v) for k, v in
                                                                                 matchers.items()},
                        "created_by": str(raw.get("createdBy") or ""), "comment": str(raw.get("comment") or ""),
                        "starts_at": str(raw.get("startsAt") or ""), "ends_at": str(raw.get("endsAt") or "")})
        out.sort(key=lambda x: x["ends_at"])
        return out

    def silence(self, matchers: dict[str, str], duration_s: float, created_by: str, comment: str) -> Silence:
        """Notifications of the alerts matching all of `matchers` (a run: project and experiment_name; an alert name
        too, or not) held back for `duration_s`; Alertmanager keeps the silence across its restarts."""
        am = self._require_am()
        if not matchers.get("project"):
            raise InvalidInputError("a silence needs the run's project (and experiment_name, or the whole project)")
        if not 60 <= duration_s <= MAX_SILENCE_S:
            raise InvalidInputError(f"a silence lasts from 1 min to {MAX_SILENCE_S // 86400:.0f} days, "
                                    f"found {duration_s:.0f} s")
        now = time.time()
        who, why = created_by[:200] or "unknown", comment[:1000] or "silenced from rl-insight"
        starts, ends = rfc3339(now), rfc3339(now + duration_s)
        made: Silence = {"id": "", "state": "active", "matchers": matchers, "created_by": who, "comment": why,
                         "starts_at": starts, "ends_at": ends}
        made["id"] = am.add_silence(_wire(made))
        with self._lock:  # (the ended ones leave the file; at most MAX_KEPT_SILENCES, the latest kept)
            self._save_kept([*(k for k in self._kept() if k["ends_at"] > starts), made][-MAX_KEPT_SILENCES:])
        return made

    def unsilence(self, silence_id: str) -> None:
        self._require_am().expire_silence(silence_id)
        with self._lock:
            self._save_kept([k for k in self._kept() if k["id"] != silence_id])

    def restore_silences(self) -> int:
        """Put back the silences set through this server that Alertmanager lost (a SIGKILL before it wrote its state
        to disk), until they end; how many. Raises what Alertmanager raises."""
        if self.am is None:
            return 0
        with self._lock:
            kept = [k for k in self._kept() if k["ends_at"] > rfc3339(time.time())]
            if not kept:
                return 0
            there = {str(s.get("id")) for s in self.am.silences()
                     if (s.get("status") or {}).get("state") in ("active", "pending")}
            lost = [k for k in kept if k["id"] not in there]
            for k in lost:
                k["id"] = self.am.add_silence(_wire({**k, "starts_at": rfc3339(time.time())}))
            self._save_kept(kept)
        return len(lost)

    def _kept(self) -> list[Silence]:
        try:
            doc = json.loads(self.silences_file.read_text())
        except (OSError, ValueError):
            return []
        items = doc.get("silences") if isinstance(doc, dict) else None
        return [cast(Silence, k) for k in items or [] if isinstance(k, dict) and set(Silence.__annotations__) <= set(k)]

    def _save_kept(self, kept: list[Silence]) -> None:
        atomic_write(self.silences_file, json.dumps({"silences": kept}), mode=0o600)

    def _require_am(self) -> Alertmanager:
        if self.am is None:
            raise ConflictError("notifications " + OFF_HINT)
        return self.am

    # ------------------------------------------------------------------ the change itself
    def _check(self, text: str) -> None:
        if not self.amtool:
            return  # Alertmanager's reload answer is the check
        with tempfile.TemporaryDirectory(prefix="rl-insight-am-") as tmp:
            path = Path(tmp) / "alertmanager.yml"
            atomic_write(path, text, mode=0o600)
            try:
                out = subprocess.run([self.amtool, "check-config", str(path)], capture_output=True, text=True,
                                     timeout=30)
            except (OSError, subprocess.SubprocessError) as exc:
                self.amtool = None  # unusable: rely on the reload answer from now on
                raise InvalidInputError(f"amtool could not check the configuration: {exc}") from None
        if out.returncode != 0:
            said = (out.stdout + out.stderr).replace(str(path), "alertmanager.yml").strip()
            raise InvalidInputError(f"Alertmanager's check refused the change: {said[:800]}",
                                    hint="nothing was changed; the running configuration is kept")

    def _change(self, receivers: list[Receiver]) -> ChangeResult:
        text = am_config.render(receivers, self.grouping, self.relay)
        self._check(text)
        before_receivers = self.file.path.read_bytes() if self.file.path.exists() else None
        before_config = self.config_path.read_bytes() if self.config_path.exists() else None
        atomic_write(self.config_path, text, mode=0o600)
        self.file.save(receivers)
        shown_now = [shown(r) for r in receivers]
        if self.am is None:
            return {"receivers": shown_now, "applied": False, "message": "saved; notifications " + OFF_HINT}
        try:
            self.am.reload()
        except AlertmanagerDown:
            return {"receivers": shown_now, "applied": False,
                    "message": f"saved; Alertmanager at {self.am.url} is not running: it reads them when it starts"}
        except AlertmanagerError as exc:
            self._restore(self.file.path, before_receivers)
            self._restore(self.config_path, before_config)
            try:
                self.am.reload()
            except AlertmanagerError:
                pass  # it still runs the configuration it had: a refused reload changes nothing in it
            raise InvalidInputError(f"{exc.message}", hint="nothing was changed; the running configuration is kept") \
                from None
        return {"receivers": shown_now, "applied": True, "message": "Alertmanager reloaded"}

    @staticmethod
    def _restore(path: Path, data: bytes | None) -> None:
        if data is None:
            path.unlink(missing_ok=True)
        else:
            atomic_write(path, data, mode=0o600)
