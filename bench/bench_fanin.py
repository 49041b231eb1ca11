"""Fan-in of one ingest process (issue 24, item 0): many simulated training clients, each on its own keep-alive
connection posting one gzip batch a second (~20 samples + 5 spans, as a trainer rank or a rollout replica sends),
against one `python -m rl_insight.server` (with its run store) and, side by side in the same run, a bare uvicorn
app that reads the body and answers a small JSON (the ceiling of the web server itself on this machine).

    python bench/bench_fanin.py [--clients 100,250,500,1000] [--seconds 15] [--targets ours,bare]
    python bench/bench_fanin.py --clients 250,500 --targets ours,pg,pg2   # the run store on PostgreSQL, two servers
    python bench/bench_fanin.py --clients 1000 --targets ours,h11,bare   # httptools (the default) against h11
    python bench/bench_fanin.py --clients 2000,4000 --interval 5 --targets ours,pg2   # thousands, at a step's cadence
    python bench/bench_fanin.py --clients 1000 --generator wrk --targets ours,bare   # the load from Debian's wrk
    python bench/bench_fanin.py --clients 1000 --generator wrk --warmup 10 --targets ours,bare   # the steady state
    python bench/bench_fanin.py --clients 1000 --generator wrk --warmup 10 --neighbour 0.5   # half a core taken
    python bench/bench_fanin.py --clients 500,500,500 --targets token,named   # a named token against the own

For each client count and target: batches/s answered, p50 / p99 latency (request written → answer read), and
failures (errors, non-2xx, a batch refused). The generator is asyncio (on uvloop where installed) with raw
streams, every request built before the clock starts (no HTTP client library, no JSON or gzip in the loop), in
this process: on a 2-core machine it competes with the server for CPU, so the numbers are a lower bound.

`--generator wrk` sends the same requests through Debian's `wrk` (C, one epoll thread; `fanin_wrk.lua`), which
leaves the server most of a 2-core machine. Its connections take the bodies in turn (each client's batch once a
round). `--cadence fixed` (the default) sends one batch a client an interval at random phases whatever the answers'
latency, as training processes and the Python generator do; `--cadence after-answer` pauses `--interval` after each
answer instead (a closed loop: a connection's period is the interval plus its latency, and answers released by one
commit come back together, so the load bunches itself up behind any stall: the harsher figure, and the one this
benchmark reported before 2026-12-03). Either way the batches/s it reports says what was offered. It has no
per-client view, so no "after the first batch" figure.

During the load /metrics is scraped every `--scrape` seconds (10, the supervised Prometheus' interval; 0: none, as
runs before 2026-12-04 were): at a thousand clients it carries 15,000 insight series, and the answers wait behind it.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import math
import os
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import IngestServer, free_port, machine

BARE_APP = '''
async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    size = 0
    while True:
        m = await receive()
        size += len(m.get("body", b""))
        if not m.get("more_body"):
            break
    body = b'{"accepted":25,"rejected":0,"errors":[],"boot_id":"bare"}'
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
'''


def batch(client: str, k: int, counters: int = 0) -> bytes:
    """Client `client`'s k-th batch: 20 samples of the run's series, and one finished state on each of its own five
    lanes (a lane is one rank's or replica's: no two processes write one). `counters`: that many of the 20 series
    are counters every client feeds (cumulative per client, summed across them by the run store's writer)."""
    now = time.time()
    series = [{"k": "c" if i < counters else "g", "n": f"actor/metric_{i}",
               "l": {"project": "fan", "experiment_name": "in"}} for i in range(20)]
    samples = [[i, now, k, float(i + k)] for i in range(20)]
    t = time.time_ns()
    spans = [{"id": f"{client}{k:08x}{i:02x}"[-16:], "trace_id": f"{k:032x}", "parent_id": None,
              "name": "vllm_generate", "lane": f"{client}/replica_{i}", "kind": "state", "start_ns": t - 1000,
              "end_ns": t,
              "attributes": {"project": "fan", "experiment_name": "in"}} for i in range(5)]
    body = {"v": 1, "client": {"id": client, "pid": 1, "host": "h", "project": "fan", "experiment_name": "in"},
            "series": series, "samples": samples, "spans": spans}
    return gzip.compress(json.dumps(body).encode(), 1)


def request(port: int, body: bytes, token: str) -> bytes:
    head = (f"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Encoding: gzip\r\nContent-Length: {len(body)}\r\n"
            + (f"Authorization: Bearer {token}\r\n" if token else "") + "\r\n")
    return head.encode() + body


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def exchange(conn: Streams, req: bytes) -> bytes:
    """One request and its whole answer on a keep-alive connection; its status line. ConnectionError when the server
    had closed the connection (an idle keep-alive timeout), before any answer."""
    reader, writer = conn
    writer.write(req)
    await writer.drain()
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed by the server")
    length = 0
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    if length:
        await reader.readexactly(length)
    return status_line


async def client(port: int, requests: list[bytes], until: float, start_at: float, out: dict,
                 interval: float = 1.0) -> None:
    """One simulated process: a batch every `interval` on one keep-alive connection, opened again when the server
    closed it while idle (what an HTTP client does: longer intervals outlast servers' keep-alive timeouts), the
    reconnection inside the batch's latency. A batch fails when a fresh connection cannot carry it either."""
    await asyncio.sleep(max(0.0, start_at - time.monotonic()))  # connect when it starts, as a job's processes do
    conn: Streams | None = None
    next_at = start_at
    try:
        for req in requests:
            now = time.monotonic()
            if next_at > now:
                await asyncio.sleep(next_at - now)
            if time.monotonic() >= until:
                break
            t0 = time.perf_counter()
            status_line = b""
            for fresh in (conn is None, True):
                try:
                    if fresh or conn is None:
                        if conn is not None:
                            conn[1].close()
                        conn = await asyncio.open_connection("127.0.0.1", port)
                    status_line = await exchange(conn, req)
                    break
                except (OSError, asyncio.IncompleteReadError):
                    if conn is not None:
                        conn[1].close()
                    conn = None
                    if fresh:
                        break
            if status_line:
                out["latencies"].append(time.perf_counter() - t0)
                if next_at > start_at:  # after its first batch (which registers the process and its series)
                    out["steady"].append(time.perf_counter() - t0)
            if b" 200 " not in status_line:
                out["failed"] += 1
                why = status_line.split(b" ", 2)[1].decode() if status_line else "no answer"
                out["why"][why] = out["why"].get(why, 0) + 1
            next_at += interval  # one batch an interval; a slow answer makes the next one late, as a real client
    finally:
        if conn is not None:
            conn[1].close()


def build_requests(port: int, n: int, seconds: float, token: str, interval: float = 1.0) -> list[list[bytes]]:
    """Every client's requests for the whole run, built before it starts (the generator's CPU goes to sending)."""
    per_client = int(seconds / interval) + 2
    return [[request(port, batch(f"c{i:06d}", k), token) for k in range(1, per_client + 1)] for i in range(n)]


async def load(port: int, requests: list[list[bytes]], seconds: float, interval: float = 1.0) -> dict:
    out: dict = {"latencies": [], "steady": [], "failed": 0, "why": {}}
    n = len(requests)
    t0 = time.monotonic()
    until = t0 + seconds
    # start times spread over the first interval, as processes of a job are not in lockstep
    await asyncio.gather(*(client(port, requests[i], until, t0 + interval * i / n, out, interval) for i in range(n)))
    out["elapsed"] = time.monotonic() - t0
    return out


def wrk_bodies(n: int, seconds: float, interval: float, first_round: int = 1) -> str:
    """Every body of a wrk run, in the order they are sent (round by round, client by client, from `first_round`),
    each behind its length as 4 bytes big-endian: the file fanin_wrk.lua reads. Built before the clock starts, as
    build_requests is."""
    rounds = int(seconds / interval) + 2
    with tempfile.NamedTemporaryFile(prefix="rl-fanin-", suffix=".bin", delete=False) as f:
        for k in range(first_round, first_round + rounds):
            for i in range(n):
                body = batch(f"c{i:06d}", k)
                f.write(struct.pack(">I", len(body)) + body)
    return f.name


CADENCES = ("fixed", "after-answer")  # fanin_wrk.lua's: when a client's batches go (see its header)


def run_wrk(port: int, n: int, seconds: float, interval: float, bodies: str, cadence: str = "fixed") -> dict:
    """The same load through wrk (fanin_wrk.lua) from `bodies` (wrk_bodies) at `cadence` (CADENCES): its summary
    (requests answered, batches/s, latencies in s, failures by kind)."""
    def more_files() -> None:  # one socket a client, beyond a soft limit of 1,024
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, n + 1024), hard))

    script = Path(__file__).resolve().parent / "fanin_wrk.lua"
    proc = subprocess.run(
        ["wrk", "-t1", f"-c{n}", f"-d{int(seconds)}s", "--timeout", "10s", "-s", str(script),
         f"http://127.0.0.1:{port}", "--", bodies, str(int(interval * 1000)), str(n), cadence],
        capture_output=True, text=True, preexec_fn=more_files, timeout=seconds + 60)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stderr.strip() or proc.stdout.strip()}")
    w = json.loads(lines[-1])
    why = {k: w[k] for k in ("connect", "read", "write", "status", "timeout") if w[k]}
    return {"requests": w["requests"], "rate": w["requests"] / (w["duration_us"] / 1e6), "p50": w["p50_us"] / 1e6,
            "p99": w["p99_us"] / 1e6, "failed": sum(why.values()), "why": why}


def run_loop(coro: Any) -> Any:
    """The generator's loop: uvloop where installed (a cheaper generator leaves more of the machine to the server)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def bare_server() -> tuple[subprocess.Popen, int]:
    d = tempfile.mkdtemp(prefix="rl-bare-")
    Path(d, "bare_app.py").write_text(BARE_APP)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "bare_app:app", "--port", str(port), "--log-level",
                             "warning", "--no-access-log"], cwd=d)
    import httpx

    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            httpx.post(f"http://127.0.0.1:{port}/", content=b"x", timeout=1)
            break
        except httpx.HTTPError:
            time.sleep(0.1)
    return proc, port


SERVER_TOKEN = "bench-fanin-server-token"


class Targets:
    """What a target name starts: our server (SQLite store), the same with a token (`token`: the server's own; `named`:
    a named ingest token held to the run's project, issue 54), the same with a 5 s idle keep-alive (`ka5`), on uvicorn's
    h11 parser (`h11`), on a
    PostgreSQL store (`pg`), two of them on one PostgreSQL behind haproxy (`pg2`), a bare uvicorn app (`bare`), or
    --before's checkout (`before`)."""

    def __init__(self, before: str | None) -> None:
        self.before = before
        self.cluster: Any = None
        self.bearer = ""

    def _store(self) -> str:
        if self.cluster is None:  # a throwaway PostgreSQL 15 cluster, as the tests start one (tests/pg_cluster.py)
            sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
            from tests.pg_cluster import PASSWORD, PostgresCluster

            self.cluster = PostgresCluster()
            self.cluster.wait_ready()
            os.environ["RL_INSIGHT_STORE_PASSWORD"] = PASSWORD
        return str(self.cluster.url(self.cluster.create_database("fanin")))

    def start(self, target: str) -> tuple[int, Callable[[], None], list[int]]:
        """The target's port, how to stop it, and the pids of its server processes (whose CPU is reported);
        `self.bearer`: the token its clients send ("" for none)."""
        self.bearer = ""
        if target in ("token", "named"):  # ours with a token: the server's own (token), a named ingest token (named)
            srv = IngestServer(token=SERVER_TOKEN)
            self.bearer = SERVER_TOKEN
            if target == "named":
                import httpx

                made = httpx.post(srv.url + "/api/v1/tokens", json={"name": "fan-ingest", "role": "ingest",
                                                                     "projects": ["fan"]},
                                  headers={"Authorization": f"Bearer {SERVER_TOKEN}"}, timeout=30)
                made.raise_for_status()
                self.bearer = made.json()["token"]
            return srv.port, srv.stop, [srv.proc.pid]
        if target in ("ours", "before"):
            srv = IngestServer(code=self.before if target == "before" else None)
            return srv.port, srv.stop, [srv.proc.pid]
        if target == "thread":  # ours with the run store's writer in a thread of the server (before issue 24's process)
            srv = IngestServer(store_writer="thread")
            return srv.port, srv.stop, [srv.proc.pid]
        if target == "noinsights":  # ours with the insight refresh (every 15 s) all but off
            srv = IngestServer(insights_interval_s=3600.0)
            return srv.port, srv.stop, [srv.proc.pid]
        if target == "insightthread":  # ours with the insight rounds on a thread of the server (before their process)
            srv = IngestServer(insights_worker="thread")
            return srv.port, srv.stop, [srv.proc.pid]
        if target == "gcpython":  # ours on CPython's collector defaults (before server/http/gc_policy.py)
            srv = IngestServer(gc_policy="python")
            return srv.port, srv.stop, [srv.proc.pid]
        if target == "nostore":  # ours without a run store: what the rest of the process costs
            srv = IngestServer(store=False)
            return srv.port, srv.stop, [srv.proc.pid]
        if target == "ka5":  # ours with uvicorn's own 5 s idle keep-alive (before `keep_alive_s`)
            srv = IngestServer(keep_alive_s=5.0)
            return srv.port, srv.stop, [srv.proc.pid]
        if target in ("h11", "asyncio"):  # one of uvicorn's other choices: the h11 parser, the stdlib loop
            srv = IngestServer(**({"http_parser": "h11"} if target == "h11" else {"event_loop": "asyncio"}))
            return srv.port, srv.stop, [srv.proc.pid]
        if target in ("pg", "pgbefore"):  # (pgbefore: --before's checkout on PostgreSQL)
            srv = IngestServer(store_url=self._store(), code=self.before if target == "pgbefore" else None)
            return srv.port, srv.stop, [srv.proc.pid]
        if target == "pg2":
            url = self._store()
            servers = [IngestServer(store_url=url) for _ in range(2)]
            lb, port = haproxy([s.port for s in servers])

            def stop() -> None:
                lb.terminate()
                lb.wait(10)
                for s in servers:
                    s.stop()
            return port, stop, [s.proc.pid for s in servers]
        proc, port = bare_server()
        return port, proc.terminate, [proc.pid]

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()


def haproxy(ports: list[int]) -> tuple[subprocess.Popen, int]:
    port = free_port()
    cfg = Path(tempfile.mkdtemp(prefix="rl-lb-")) / "haproxy.cfg"
    servers = "\n".join(f"    server s{i} 127.0.0.1:{p}" for i, p in enumerate(ports))
    cfg.write_text(f"defaults\n    mode http\n    timeout connect 1s\n    timeout client 60s\n    timeout server 60s\n"
                   f"    maxconn 20000\nfrontend f\n    bind 127.0.0.1:{port}\n    maxconn 20000\n"
                   f"    default_backend b\nbackend b\n    balance leastconn\n{servers}\n")
    proc = subprocess.Popen(["haproxy", "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    return proc, port


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs (the run store's writer, the insight rounds): Linux /proc."""
    try:
        kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return kids + [d for k in kids for d in descendants(k)]


def cpu_seconds(pids: list[int]) -> tuple[float, float]:
    """User + system CPU used so far by the processes and by what they started (Linux /proc)."""
    def used(pid: int) -> int:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0
        return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)

    tick = os.sysconf("SC_CLK_TCK")
    return (sum(used(p) for p in pids) / tick,
            sum(used(d) for p in pids for d in descendants(p)) / tick)


def ack_wait_buckets(port: int) -> dict[str, float]:
    """The server's rl_insight_server_ingest_ack_wait_seconds buckets now (ours only; {} where there are none)."""
    import httpx

    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
    except httpx.HTTPError:
        return {}
    buckets = {}
    for line in text.splitlines():
        if line.startswith("rl_insight_server_ingest_ack_wait_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets[le] = float(line.rsplit(" ", 1)[1])
    return buckets


def ack_waits(port: int, before: dict[str, float] | None = None) -> str:
    """The share of answers that waited over 0.1 and 0.25 s for their commit since `before` (ack_wait_buckets);
    '' where there is no such histogram."""
    buckets = {le: n - (before or {}).get(le, 0.0) for le, n in ack_wait_buckets(port).items()}
    total = buckets.get("+Inf", 0)
    if not total:
        return ""
    return (f"commit waits over 0.1 s {1 - buckets['0.1'] / total:.1%}, over 0.25 s "
            f"{1 - buckets['0.25'] / total:.1%}")


def background_work(port: int) -> str:
    """What the server's background work did (ours: /healthz): the timeline summary's buckets built and whether it
    is behind, how many insight rounds ran and how long the last took; '' where it says nothing."""
    import httpx

    try:
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10).json()
    except (httpx.HTTPError, ValueError):
        return ""
    out = []
    summary = (health.get("store") or {}).get("timeline_summary") or {}
    if summary:
        out.append(f"summary buckets {summary.get('buckets_built')}{' (behind)' if summary.get('behind') else ''}")
    ins = health.get("insights") or {}
    if ins.get("rounds") or ins.get("failed_rounds"):
        out.append(f"insight rounds {ins['rounds']} ({ins['worker']}), the last {ins['last_round_s']:.2f} s")
    return ", ".join(out)


def cost(cpu_s: tuple[float, float], batches: float, elapsed_s: float) -> str:
    """The server processes' CPU: the share of one core, and per batch answered (what one process's GIL bounds);
    its child processes' (the run store's writer, the insight rounds) apart."""
    main, kids = cpu_s
    per = main / batches * 1000 if batches else float("nan")
    text = f"server CPU {main / elapsed_s:.0%} of a core, {per:.2f} ms a batch"
    return text + (f" (+ its child processes {kids / elapsed_s:.0%})" if kids else "")


NEIGHBOUR = r"""
import sys, time
duty, period = float(sys.argv[1]), 0.01
while True:  # busy for duty x 10 ms, asleep for the rest: a neighbour using `duty` of a core
    start = time.monotonic()
    while time.monotonic() - start < duty * period:
        pass
    time.sleep(max(0.0, period - (time.monotonic() - start)))
"""


class Neighbour:
    """A busy neighbour on the same machine while the load runs: `cores` of CPU burnt by ceil(cores) processes at
    the server's priority, each busy for its share of every 10 ms. The host's busy hours made the same work cost
    1.5-2x the CPU and the p99 10x (bench/RESULTS.md, 2026-12-04); this makes such an hour happen on demand, so that
    how much of the machine a server needs to spare is measured, not waited for."""

    def __init__(self, cores: float) -> None:
        n = math.ceil(cores) if cores > 0 else 0
        self.duties = [cores / n] * n if n else []
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> "Neighbour":
        self.procs = [subprocess.Popen([sys.executable, "-c", NEIGHBOUR, str(d)]) for d in self.duties]
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()

    def report(self) -> str:
        return f"a neighbour burning {sum(self.duties):.2f} cores" if self.duties else ""


class Scraper:
    """GET /metrics every `every_s` seconds while the load runs, as the Prometheus the server supervises does (every
    `scrape_interval_s`, 10 s): a scrape is work on the ingest process the answers wait behind. `report()`: how many,
    the slowest, the largest."""

    def __init__(self, port: int, every_s: float) -> None:
        self.port, self.every_s = port, every_s
        self.took: list[float] = []
        self.sizes: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Scraper":
        if self.every_s > 0:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def _run(self) -> None:
        import httpx

        with httpx.Client(timeout=10) as http:
            while not self._stop.wait(self.every_s):
                t0 = time.monotonic()
                try:
                    size = len(http.get(f"http://127.0.0.1:{self.port}/metrics").content)
                except httpx.HTTPError:
                    continue
                self.took.append(time.monotonic() - t0)
                self.sizes.append(size)

    def report(self) -> str:
        if not self.took:
            return ""
        return (f"{len(self.took)} scrapes of /metrics, the slowest {max(self.took) * 1000:.0f} ms, "
                f"up to {max(self.sizes) / 1e6:.2f} MB")


def pct(sorted_s: list[float], q: float) -> float:
    """The q-quantile of sorted latencies in seconds, in ms (nan for none)."""
    return sorted_s[min(len(sorted_s) - 1, int(q * len(sorted_s)))] * 1000 if sorted_s else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", default="100,250,500,1000")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--targets", default="ours,bare", help="ours, token (ours with the server's own token), named "
                    "(ours with a named ingest token of the run's project: what the token check costs, against "
                    "token), thread (ours with the "
                    "writer in the server's process), gcpython (ours on CPython's garbage collector defaults), "
                    "noinsights (ours with the insight refresh once an hour), insightthread (ours with the insight "
                    "rounds on a thread of the server), "
                    "nostore (ours without a run store: what the "
                    "rest of the process costs), ka5 (ours with a 5 s idle keep-alive), h11 (ours "
                    "on uvicorn's h11 parser), asyncio (on "
                    "the stdlib loop), pg, pgbefore (--before on PostgreSQL), pg2 (two servers behind haproxy on one "
                    "PostgreSQL), bare, and before "
                    "(--before's checkout)")
    ap.add_argument("--before", default=None, help="a checkout of the code to compare with (git worktree add …)")
    ap.add_argument("--generator", choices=("python", "wrk"), default="python", help="the load: this process's "
                    "asyncio clients, or Debian's wrk (fanin_wrk.lua: leaves the server more of a small machine)")
    ap.add_argument("--warmup", type=float, default=0.0, help="with --generator wrk: seconds of the same load "
                    "before the measured run, on the same server (its clients known and connected once: the "
                    "steady state, without the first second's registrations and connects in the figures)")
    ap.add_argument("--cadence", default="fixed", help="with --generator wrk: when a client's batches go: one an "
                    "interval at its own phase whatever the answers' latency (fixed: what a training process does), "
                    "or an interval after each answer (after-answer: a closed loop); both, comma-separated, "
                    "interleaved")
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between a client's batches (1: the issue's "
                    "cadence; a trainer rank or a rollout replica sends about once a step, 5 s to minutes)")
    ap.add_argument("--scrape", type=float, default=10.0, help="seconds between GETs of /metrics during the load, as "
                    "the supervised Prometheus scrapes (10; 0: none, as this benchmark did before 2026-12-04)")
    ap.add_argument("--neighbour", type=float, default=0.0, help="cores a busy neighbour burns on this machine "
                    "during the measured load (0.5: half a core; 1.5: two processes at 75 %%): a busy hour on demand")
    args = ap.parse_args()
    if args.generator == "wrk" and {"token", "named"} & set(args.targets.split(",")):
        raise SystemExit("the token and named targets need the Python generator (fanin_wrk.lua sends no token)")
    if args.generator == "wrk" and shutil.which("wrk") is None:
        raise SystemExit("--generator wrk needs Debian's wrk: apt-get install wrk")
    cadences = args.cadence.split(",")
    if unknown := [c for c in cadences if c not in CADENCES]:
        raise SystemExit(f"--cadence: {', '.join(unknown)} is not one of {', '.join(CADENCES)}")
    if args.generator != "wrk":
        cadences = ["fixed"]  # (the Python generator's clients keep their own phases)
    print(f"machine: {machine()}")
    targets = Targets(args.before)
    try:
        for n in [int(x) for x in args.clients.split(",")]:
            for cadence, target in [(c, t) for c in cadences for t in args.targets.split(",")]:  # interleaved
                port, stop, pids = targets.start(target)
                bodies = None
                try:
                    before: dict[str, float] = {}
                    if args.generator == "wrk":
                        if args.warmup:  # every client known (series, lanes) and connected once: the steady state
                            warm = wrk_bodies(n, args.warmup, args.interval)
                            try:
                                run_wrk(port, n, args.warmup, args.interval, warm, cadence)
                            finally:
                                os.unlink(warm)
                            before = ack_wait_buckets(port)
                        bodies = wrk_bodies(n, args.seconds, args.interval,
                                            first_round=int(args.warmup / args.interval) + 3)
                    else:
                        requests = build_requests(port, n, args.seconds, targets.bearer, args.interval)
                    cpu0, t0 = cpu_seconds(pids), time.monotonic()  # the server's CPU over the load alone
                    with Scraper(port, args.scrape) as scrapes, Neighbour(args.neighbour) as neighbour:
                        if args.generator == "wrk":
                            w = run_wrk(port, n, args.seconds, args.interval, bodies, cadence)
                        else:
                            out = run_loop(load(port, requests, args.seconds, args.interval))
                    cpu1, elapsed = cpu_seconds(pids), time.monotonic() - t0
                    cpu = (cpu1[0] - cpu0[0], cpu1[1] - cpu0[1])
                    waits = ack_waits(port, before)
                    rounds = background_work(port)
                    waits = "; ".join(x for x in (waits, rounds, scrapes.report(), neighbour.report()) if x)
                finally:
                    stop()
                    if bodies is not None:
                        os.unlink(bodies)
                if args.generator == "wrk":
                    print(f"  {target:6s} {n:5d} clients (wrk, {cadence}): {w['rate']:7.0f} batches/s, "
                          f"p50 {w['p50'] * 1000:6.0f} ms, p99 {w['p99'] * 1000:6.0f} ms, failed {w['failed']}; "
                          f"{cost(cpu, w['requests'], elapsed)}"
                          + (f"; {waits}" if waits else "") + (f" (failures: {w['why']})" if w["why"] else ""))
                    continue
                lat, steady = sorted(out["latencies"]), sorted(out["steady"])
                print(f"  {target:6s} {n:5d} clients: {len(lat) / out['elapsed']:7.0f} batches/s, "
                      f"p50 {pct(lat, 0.5):6.0f} ms, p99 {pct(lat, 0.99):6.0f} ms, failed {out['failed']}; "
                      f"after each client's first batch: p99 {pct(steady, 0.99):6.0f} ms; "
                      f"{cost(cpu, len(lat), elapsed)}"
                      + (f"; {waits}" if waits else "")
                      + (f" (failures: {out['why']})" if out["why"] else ""))
    finally:
        targets.close()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
