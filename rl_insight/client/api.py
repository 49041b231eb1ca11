"""The public training API (drop-in for upstream RL-Insight 0.3.0 as verl calls it).

Every function is a silent no-op until `init()` succeeds with a server URL. After that nothing
raises into the training loop: internal errors are counted (`client_error` drops) and logged at a
limited rate. The one exception is upstream's `ValueError` for mismatched `labels` in
`update_prometheus_config`, which verl relies on.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import warnings
from time import time as _now
from time import time_ns

from .. import env as _env
from . import lanes as _lanes_mod
from .batching import _GAUGE
from .config import ClientConfig, load_config, resolve_identity, resolve_token, resolve_url
from .delivery import LOG_ERROR, LOG_WARNING, Delivery
from .lanes import NOOP_BLOCK, DeferredNoop, LaneTable, NoopBlock, StateBlock
from .ratelog import ratelog
from .urls import parse_server_urls

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterable, Mapping, Sequence

# Process-local state. `_rt` is the enabled exporter, or None while disabled: the hot path checks
# only this one global.
_rt: Delivery | None = None
_reg_only: Delivery | None = None  # exporter used by update_prometheus_config before init()
_lanes = LaneTable()
_init_lock = threading.Lock()
_pid_lane = str(os.getpid())
_atexit_registered = False
UNREACHABLE_FINISH_S = 0.5  # finish() waits at most this long when the server did not answer lately


def _internal_error(where: str, exc: BaseException) -> None:
    rt = _rt
    if rt is not None:
        rt.drop("client_error")
    ratelog.log(LOG_ERROR, "internal:" + where, "[rl-insight] internal error in %s (ignored): %r", where, exc)


# ---------------------------------------------------------------------------- lifecycle
def init(project: str | None = None, experiment_name: str | None = None, config: Any = None, *,
         transport: Callable[[], Any] | None = None) -> None:
    """Enable monitoring for this process. Without a server URL this leaves everything a no-op.

    `transport`: a factory for the object that sends batches (see client/transport.py `Transport`);
    the default posts over HTTP to the configured URL."""
    global _rt, _reg_only, _atexit_registered
    with _init_lock:
        if _rt is not None:
            warnings.warn(
                "[rl-insight] init() called more than once; ignoring re-initialization.", RuntimeWarning, stacklevel=2
            )
            return
        try:
            cfg = load_config(config)
        except Exception as exc:  # a malformed config must not crash training
            _internal_error("init", exc)
            return
        if not cfg.enabled:
            ratelog.log(LOG_WARNING, "no-url", "[rl-insight] no server URL (set RL_INSIGHT_SERVER_URL or "
                                               "config['server']['url']); monitoring is off")
            return
        try:
            url = parse_server_urls(cfg.url)
        except ValueError as exc:
            ratelog.log(LOG_ERROR, "bad-url", "[rl-insight] %s; monitoring is off", exc)
            return
        labels = resolve_identity(project, experiment_name)
        if len(labels) == 1:  # upstream main: both or neither (checked before anything is enabled)
            raise ValueError("[rl-insight] init() needs both project and experiment_name, or neither; got only "
                             f"{next(iter(labels))}")
        run_info = None
        if labels:  # only a process that names its run describes it (verl's driver passes its trainer config)
            try:
                from .runinfo import describe

                run_info = describe(config, _env.get(_env.TAGS) or "")
            except Exception as exc:
                _internal_error("init", exc)
        try:
            exp = Delivery(cfg, url, labels, transport, run_info=run_info)
        except Exception as exc:
            _internal_error("init", exc)
            return
        if _reg_only is not None:  # hand over registrations made before init, keep one thread
            for payload in _reg_only.registrations.take():
                exp.register_targets(payload)
            _reg_only.shutdown(0)
            _reg_only = None
        exp.open_states = _open_states
        exp.lane_holders = _lane_holders
        _rt = exp
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True


def finish(timeout: float | None = None) -> None:
    """Flush what is queued (bounded by `timeout`, default the exit timeout) and disable monitoring.

    When the last attempts to reach the server failed, it waits at most 0.5 s (as upstream, which
    does not wait at all): what could not be sent is counted and logged once, never a 5 s stall."""
    global _rt
    with _init_lock:
        rt, _rt = _rt, None
        _lanes.reset()
    if rt is not None:
        try:
            wait = rt.cfg.exit_timeout_s if timeout is None else timeout
            if rt.unreachable():
                wait = min(wait, UNREACHABLE_FINISH_S)
            started = time.monotonic()
            rt.profiling.settle(wait)  # a trace being sent goes out first, within the same bound
            rt.profiling.at_exit()
            if not rt.shutdown(max(0.0, wait - (time.monotonic() - started))):
                rt.report_undelivered()
        except Exception as exc:
            _internal_error("finish", exc)


def flush(timeout: float | None = 5.0) -> bool:
    """Block until everything queued so far is delivered, or `timeout` seconds pass. Never raises."""
    ok = True
    for exp in (_rt, _reg_only):
        if exp is not None:
            try:
                ok = exp.flush(timeout) and ok
            except Exception as exc:
                _internal_error("flush", exc)
                ok = False
    return ok


def is_enabled() -> bool:
    return _rt is not None


def stats() -> dict[str, Any]:
    """Delivery counters of this process (sent, retries, drops by reason, queue depth)."""
    rt = _rt
    if rt is None:
        return {"enabled": False}
    with rt._drop_lock:
        drops = dict(rt.drops)
    return {"enabled": True, "sent": rt.sent_items, "batches": rt.sent_batches, "retries": rt.retries,
            "dropped": drops, "queue_depth": len(rt.queue), "step": rt.step}


def _at_exit() -> None:
    rt = _rt
    if rt is not None:
        try:
            wait = min(rt.cfg.exit_timeout_s, UNREACHABLE_FINISH_S) if rt.unreachable() else rt.cfg.exit_timeout_s
            started = time.monotonic()
            rt.profiling.settle(wait)  # a trace being sent goes out first, within the same bound
            rt.profiling.at_exit()  # a profiling window still open is closed and reported, never left half-done
            if not rt.shutdown(max(0.0, wait - (time.monotonic() - started))):
                rt.report_undelivered()
        except Exception:
            pass
    if _reg_only is not None:
        try:
            _reg_only.shutdown(_reg_only.cfg.exit_timeout_s)
        except Exception:
            pass


def _open_states() -> list:
    return _lanes.open_starts()  # the module's table now (a forked child has a fresh one)


def _lane_holders() -> list:
    return _lanes.holders()


def _after_fork_in_child() -> None:
    """Ray, DataLoader and vLLM fork: the child gets a fresh queue, thread and cumulative state."""
    global _rt, _reg_only, _lanes, _init_lock, _pid_lane
    _init_lock = threading.Lock()
    _lanes = LaneTable()
    _pid_lane = str(os.getpid())
    _reg_only = None  # the parent's pending registrations stay with the parent
    parent = _rt
    _rt = None
    if parent is not None:
        try:
            _rt = Delivery(parent.cfg, parent.urls, parent.base_labels, parent._transport_factory)
            _rt.open_states = _open_states
            _rt.lane_holders = _lane_holders
        except Exception:
            _rt = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


# ---------------------------------------------------------------------------- metrics
def metric_gauge(name: str, value: float, documentation: str = "", **labels: Any) -> None:
    rt = _rt
    if rt is None:
        return
    try:
        if labels or name not in rt.plain_names:
            rt.gauge(name, value, documentation, labels)  # labels, or a name not known yet (the step metric?)
        else:  # the usual call, a known name without labels: queued here, a method call less (Delivery.gauge's end)
            q = rt.queue
            if len(q) >= rt.queue_max:
                rt.drop("queue_full")
            q.append((_GAUGE, name, value, labels, documentation, _now(), rt.step))
    except Exception as exc:
        _internal_error("metric_gauge", exc)


def metric_count(name: str, amount: float = 1.0, documentation: str = "", **labels: Any) -> None:
    rt = _rt
    if rt is None:
        return
    try:
        rt.count(name, amount, documentation, labels)
    except Exception as exc:
        _internal_error("metric_count", exc)


def metric_histogram(name: str, value: float, documentation: str = "", **labels: Any) -> None:
    rt = _rt
    if rt is None:
        return
    try:
        rt.observe(name, value, documentation, labels)
    except Exception as exc:
        _internal_error("metric_histogram", exc)


# ---------------------------------------------------------------------------- traces
def trace_state(state_name: str, *, state_lane_id: Any = None, **labels: Any) -> StateBlock | NoopBlock:
    """Context manager (sync or async) or decorator (sync or async functions) marking `state_name` busy
    on a lane; see lanes.py."""
    rt = _rt
    if rt is None:
        return DeferredNoop((state_name, state_lane_id, labels))  # as a decorator it traces once monitoring is on
    lane = _pid_lane if state_lane_id is None else state_lane_id if type(state_lane_id) is str else str(state_lane_id)
    return StateBlock(rt, _lanes, str(state_name), lane, labels)


def _trace_state_from_spec(state_name: str, state_lane_id: Any, labels: dict) -> StateBlock | NoopBlock:
    block = trace_state(state_name, state_lane_id=state_lane_id, **labels)
    return NOOP_BLOCK if isinstance(block, DeferredNoop) else block


_lanes_mod._trace_state = _trace_state_from_spec


def trace_span(*, name: str, start_time_ns: int, end_time_ns: int, attributes: Mapping[str, Any] | None = None) -> None:
    """Report a finished span as is (the server validates it)."""
    rt = _rt
    if rt is None:
        return
    try:
        attrs = dict(attributes) if attributes else {}
        lane = attrs.get("state_lane_id")
        sid = rt.new_span_id()
        rt.span(sid, rt.new_trace_id(sid), None, name, None if lane is None else str(lane),
                start_time_ns, end_time_ns, attrs, "span")
    except Exception as exc:
        _internal_error("trace_span", exc)


def _emit_op(span_name: str, start_ns: int, static_labels: dict, extra_labels: Callable | None, args: tuple) -> None:
    rt = _rt
    if rt is None:
        return
    try:
        attrs = dict(static_labels)
        if extra_labels is not None and args:
            try:
                attrs.update(extra_labels(args[0]))
            except Exception as exc:
                warnings.warn(
                    f"[rl-insight] trace_op extra_labels callback failed: {exc!r}", RuntimeWarning, stacklevel=3
                )
        attrs["monitor.trace_segment"] = "duration"
        sid = rt.new_span_id()
        rt.span(sid, rt.new_trace_id(sid), None, span_name, None, start_ns, time_ns(), attrs, "op")
    except Exception as exc:
        _internal_error("trace_op", exc)


def trace_op(
    name: Any = None, *, extra_labels: Callable[[Any], Mapping[str, Any]] | None = None, **static_labels: Any
) -> Callable:
    """Decorator: one duration span per call of a sync or async function (also when it raises)."""

    def decorate(func: Callable) -> Callable:
        import functools
        import inspect

        span_name = name if isinstance(name, str) and name else func.__qualname__

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                if _rt is None:
                    return await func(*args, **kwargs)
                start = time_ns()
                try:
                    return await func(*args, **kwargs)
                finally:
                    _emit_op(span_name, start, static_labels, extra_labels, args)

            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if _rt is None:
                return func(*args, **kwargs)
            start = time_ns()
            try:
                return func(*args, **kwargs)
            finally:
                _emit_op(span_name, start, static_labels, extra_labels, args)

        return wrapper

    if callable(name) and not isinstance(name, str):  # bare @trace_op
        func, name = name, None
        return decorate(func)
    return decorate


# ---------------------------------------------------------------------------- scrape targets
def update_prometheus_config(server_addresses: Sequence[Any] | Iterable[Any], job_name: str | None = None,
                             labels: Sequence[Mapping[str, Any]] | None = None, *, project: str | None = None,
                             experiment_name: str | None = None) -> None:
    """Register `host:port` scrape targets with the server; returns at once, retries in the background.

    `project` / `experiment_name` (upstream main): both or neither; they put the targets into that
    experiment (default: the identity given to init())."""
    global _reg_only
    addresses = list(server_addresses or [])
    if labels is not None and len(labels) != len(addresses):
        raise ValueError(f"labels length must match server_addresses length: {len(labels)} != {len(addresses)}")
    if (project is None) != (experiment_name is None) or any(
        v is not None and not str(v).strip() for v in (project, experiment_name)
    ):
        raise ValueError("update_prometheus_config() needs both project and experiment_name (non-empty), or neither")
    try:
        if not addresses:
            ratelog.log(LOG_WARNING, "no-addresses", "[rl-insight] No server addresses available to register")
            return
        targets = []
        for i, addr in enumerate(addresses):
            entry: dict[str, Any] = {"target": str(addr)}
            if labels is not None and labels[i]:
                entry["labels"] = {str(k): str(v) for k, v in dict(labels[i]).items()}
            targets.append(entry)
        payload: dict[str, Any] = {"job_name": job_name or "trainer_metrics", "targets": targets}
        exp = _rt
        if project is not None:
            payload.update(project=str(project).strip(), experiment_name=str(experiment_name).strip())
        elif exp is not None and len(exp.base_labels) == 2:
            payload.update(exp.base_labels)  # top-level project / experiment_name
        if exp is None:
            with _init_lock:
                exp = _reg_only
                url = resolve_url(None)
                if exp is not None and exp.cfg.url != url:
                    # RL_INSIGHT_SERVER_URL changed (e.g. after finish()): follow it; the old sender stops
                    exp.shutdown(0)
                    exp.report_undelivered()
                    exp = _reg_only = None
                if exp is None:
                    if not url:
                        ratelog.log(LOG_ERROR, "reg-no-url", "[rl-insight] cannot register targets: "
                                                             "RL_INSIGHT_SERVER_URL is not set")
                        return
                    try:
                        parsed = parse_server_urls(url)
                    except ValueError as exc:
                        ratelog.log(LOG_ERROR, "bad-url", "[rl-insight] cannot register targets: %s", exc)
                        return
                    exp = _reg_only = Delivery(ClientConfig(url=url, token=resolve_token(None)), parsed, {})
                    _register_atexit()
        exp.register_targets(payload)
    except Exception as exc:
        _internal_error("update_prometheus_config", exc)


def _register_atexit() -> None:
    global _atexit_registered
    if not _atexit_registered:
        atexit.register(_at_exit)
        _atexit_registered = True
