"""Regression tests for hardening round two (issue 21): the new surfaces (profile uploads, OTLP intake, run
config, the UI on token servers) and data that was acknowledged. Each test is named after the case it covers
(`test_r2_<case>_…`) and failed on the code before the fix. Real HTTP against real servers on loopback; the
profile analysis runs in its real child process. The SIGKILL cases (4, 5) are in
tests/integration/test_ack_durability.py.
"""

from __future__ import annotations

import gzip
import json
import pickle
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

import rl_insight
from rl_insight.analysis.parsers import torch_trace
from rl_insight.analysis.table import Report
from rl_insight.errors import BusyError, ConflictError, InvalidInputError, PayloadTooLargeError
from rl_insight.server.rooms.profiles.book import ProfileBook
from rl_insight.server.rooms.profiles.files import JOURNAL
from tests.conftest import answers_healthz, free_port, start_server, wait_until

TOKEN = "round-two-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NAME = "actor_rank0_pid7_20261130120000123.json.gz"
ANNOTATION = {"ph": "X", "cat": "user_annotation", "name": "actor_update", "ts": 1.0, "dur": 5.0, "pid": 1, "tid": 1}

# a run that has not sent data yet: a request for it waits for the job (`profile request --before-start`)
NOT_YET_RUN = {"project": "p", "experiment_name": "e", "wait_for_run": True}


def _damaged_trace(copies: int) -> bytes:
    """A truncated torch trace whose text before traceEvents repeats a key thousands of times (case 1)."""
    head = b'{"schemaVersion": 1, ' + b'"distributedInfo": {"a": 1} }' * copies
    return head + b', "traceEvents": [' + json.dumps(ANNOTATION).encode() + b', {"ph": "X", "na'


def _book(tmp_path: Path, **kw: object) -> ProfileBook:
    return ProfileBook(tmp_path / "profiles", analyze=False, **kw)


def _upload(book: ProfileBook, rid: str, data: bytes, name: str = NAME) -> dict:
    return book.upload(rid, name, 0, len(data), data)


# ---------------------------------------------------------------------------------------------------- case 1
def test_r2_01_a_damaged_header_is_read_in_linear_time() -> None:
    """600 kB of repeated keys before traceEvents: the old regex took minutes (33 s at 300 kB); a linear scan
    takes milliseconds. Run in a child with a deadline far above linear and far below quadratic."""
    code = (
        "import sys, pathlib, tempfile; from rl_insight.analysis.parsers import torch_trace as t; "
        "from rl_insight.analysis.table import Report; from tests.unit.contract.test_hostile_input_round2 import "
        "_damaged_trace; "
        "p = pathlib.Path(tempfile.mkdtemp()) / 'x.json'; p.write_bytes(_damaged_trace(20_000)); r = Report(); "
        "c = t.parse(p, r); print(len(c.segments))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[3])
    assert out.returncode == 0, out.stderr
    header = torch_trace._header(_damaged_trace(3))
    assert header.distributedInfo == {"a": 1}


def test_r2_01_an_uploaded_damaged_trace_is_analysed_outside_the_server(tmp_path: Path) -> None:
    url, proc = _server_process(tmp_path, token=TOKEN)  # its own process: a stall there cannot hide behind our GIL
    try:
        api = httpx.Client(base_url=url, headers=AUTH, timeout=10)
        rid = api.post("/api/v1/profiles", json={**NOT_YET_RUN, "steps": "1"}).json()["id"]
        data = gzip.compress(_damaged_trace(10_000))
        assert len(data) < 2_000  # a tiny upload
        r = api.post(f"/api/v1/profiles/{rid}/upload/{NAME}", params={"offset": 0, "total": len(data)}, content=data,
                     headers={"Content-Type": "application/octet-stream"})
        assert r.status_code == 200, r.text
        # the server answers throughout the analysis (the old code held the GIL in the server for seconds)
        deadline = time.monotonic() + 90
        while (done := api.get(f"/api/v1/profiles/{rid}", timeout=3).json()["analysis"])["state"] not in (
            "done",
            "failed",
        ):
            assert time.monotonic() < deadline, done
            assert httpx.get(url + "/healthz", timeout=3).status_code == 200
            time.sleep(0.05)
        assert done["state"] == "done" and done["events"] >= 1
    finally:
        proc.terminate()
        proc.wait(15)


def _server_process(tmp_path: Path, **config: object) -> tuple[str, subprocess.Popen]:
    port = free_port()
    cfg = tmp_path / "server.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": port, "data_dir": str(tmp_path / "data"), **config}))
    proc = subprocess.Popen([sys.executable, "-m", "rl_insight.server", "--config", str(cfg), "--log-level", "error"])
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: answers_healthz(url), timeout=30, what="server")
    return url, proc


# ---------------------------------------------------------------------------------------------------- case 2
@pytest.mark.socket  # (the analysis runs in a child process)
def test_r2_02_a_gzip_bomb_is_inflated_only_up_to_its_bound_and_fails_with_the_reason(tmp_path: Path) -> None:
    bomb = gzip.compress(b" " * (64 * 2**20))  # 64 MiB of nothing in ~64 kB
    path = tmp_path / "bomb.json.gz"
    path.write_bytes(bomb)
    with pytest.raises(torch_trace.InflateLimitError, match="inflates past"):
        torch_trace.read_bytes(path, Report(), limit=2**20)
    book = _book(tmp_path, analysis_max_memory_bytes=2 * 2**30)
    rid = book.create("p", "e", 1, 1, max_bytes=256 * 1024)["id"]  # inflate bound: 16 x 256 KiB = 4 MiB
    _upload(book, rid, bomb)
    book.analysis.run_one(rid)
    a = book.get(rid)["analysis"]
    assert a["state"] == "failed" and "inflates past" in a["message"] and a["attempts"] == 1


def test_r2_02_an_analysis_interrupted_by_stops_runs_once_more_then_never(tmp_path: Path) -> None:
    book = _book(tmp_path)
    rid = book.create("p", "e", 1, 1)["id"]
    rec = book._records[rid]
    book.analysis.set_result(rec, {"state": "running", "attempts": 1})  # the server was killed during the first run
    again = _book(tmp_path)
    assert again.get(rid)["analysis"]["state"] == "pending"
    again.analysis.set_result(again._records[rid], {"state": "running", "attempts": 2})  # killed again
    last = _book(tmp_path)
    a = last.get(rid)["analysis"]
    assert a["state"] == "failed" and "interrupted 2 times" in a["message"]


# ---------------------------------------------------------------------------------------------------- case 3
def test_r2_03_otlp_protobuf_is_walked_with_caps_not_converted_whole() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    from rl_insight.server.intake.otlp import MAX_LEAVES, decode_request, to_batches

    req = ExportTraceServiceRequest()
    span = req.resource_spans.add().scope_spans.add().spans.add()
    span.name, span.span_id, span.trace_id = "s", b"\x01" * 8, b"\x02" * 16
    span.start_time_unix_nano, span.end_time_unix_nano = 1_790_000_000 * 10**9, 1_790_000_001 * 10**9
    for i in range(20_000):  # many tiny attributes
        kv = span.attributes.add()
        kv.key, kv.value.int_value = f"k{i}", i
    nested = span.attributes.add()
    nested.key = "deep"
    arr = nested.value.array_value
    for _ in range(200):
        inner = arr.values.add().array_value
        for j in range(200):
            inner.values.add().int_value = j
    pairs, b64 = decode_request(req.SerializeToString(), "application/x-protobuf")
    batches, counts = to_batches(pairs, b64)
    (batch,) = batches.values()
    attrs = batch["spans"][0]["attributes"]
    assert len(attrs) <= 128 + 8 and counts["capped"] >= 20_000 - 128  # every attribute not kept is counted
    assert json.dumps(attrs).count(",") < 2 * MAX_LEAVES  # the nested 40,000 values: at most a span's budget


def test_r2_03_the_otlp_http_intake_refuses_past_its_bound_with_503() -> None:
    from rl_insight.server.intake.gate import IntakeGate

    gate = IntakeGate(2, 100, "busy")
    with gate.admit(60), gate.admit(30):
        with pytest.raises(BusyError) as err:
            with gate.admit(1):
                pass
        assert err.value.http_status == 503
    with gate.admit(60):
        with pytest.raises(BusyError):  # the bytes bound: 60 + 60 > 100
            with gate.admit(60):
                pass
    with gate.admit(100):  # freed again
        pass


# ---------------------------------------------------------------------------------------------------- case 4 (store
# half)
def test_r2_04_a_resent_sample_is_stored_once(tmp_path: Path) -> None:
    from rl_insight.server.runstore.reader import RunStoreReader
    from rl_insight.server.runstore.rows import SampleRow
    from rl_insight.server.runstore.writer import RunStoreWriter

    w = RunStoreWriter(tmp_path / "rs.sqlite")
    try:
        rows = [SampleRow("p", "e", "timing_s_step", "gauge", "{}", float(s), 1000.0 + s, 0.5 * s) for s in (100, 103)]
        since = w.seq()
        w.put_samples(rows)
        w.put_samples(rows)  # the restart resend: same series, step, time and value
        assert w.durable(since).result(10) is True
        n = RunStoreReader(tmp_path / "rs.sqlite").conn().execute("SELECT count(*) FROM samples").fetchone()[0]
        assert n == 2
    finally:
        w.close()


# ---------------------------------------------------------------------------------------------------- case 6
def test_r2_06_the_ui_session_requests_and_cancels_profiles_on_a_token_server(tmp_path: Path) -> None:
    srv = start_server(tmp_path, token=TOKEN)
    try:
        ui = httpx.Client(base_url=srv.url, timeout=10)
        assert ui.post("/api/v1/login", json={"token": TOKEN}).status_code == 200  # the sign-in form
        same_origin = {"Origin": srv.url}
        r = ui.post(
            "/api/v1/profiles", json={**NOT_YET_RUN, "steps": "3"}, headers=same_origin
        )
        assert r.status_code == 201, r.text
        rid = r.json()["id"]
        assert ui.delete(f"/api/v1/profiles/{rid}", headers=same_origin).json()["state"] == "cancelled"
        # what processes do stays token-only, and a foreign page cannot use the cookie
        proc = {"state": "armed", "process": {"host": "h", "pid": 1}}
        assert ui.post(f"/api/v1/profiles/{rid}/status", json=proc, headers=same_origin).status_code == 401
        foreign = ui.post("/api/v1/profiles", json={**NOT_YET_RUN, "steps": "3"},
                          headers={"Origin": "https://evil.example"})
        assert foreign.status_code == 403
        assert (
            httpx.post(
                srv.url + "/api/v1/profiles", json={**NOT_YET_RUN, "steps": "3"}
            ).status_code
            == 401
        )
    finally:
        srv.stop()


# ---------------------------------------------------------------------------------------------------- case 7
SECRETS = {
    "api-key": "s3cr3t-api-key-1",
    "private-key": "-----BEGIN KEY-----abc",
    "passphrase": "correct horse battery",
    "X-Api-Key": "xapikey-12345678",
    "aws_access_key_id": "AKIAABCDEFGHIJKLMNOP",
    "aws_secret_access_key": "wJalrXUtnFEMI-K7MDENG",
    "hf_token": "hf_abcdefghijklmnopqrstuvwxyz123456",
    "HF_TOKEN": "hf_zyxwvutsrqponmlkjihgfedcba654321",
    "password": "hunter2-hunter2",
    "db_password": "pg-pass-98765",
    "client_secret": "oauth-client-secret-1",
    "auth_token": "tok-auth-24680",
    "access_token": "tok-access-13579",
    "openai_api_key": "sk-proj-abcdefghijklmnopqrstuv",
    "slack_webhook": "https://hooks.slack.com/services/T0/B0/abcdefghij",
    "credentials": "user:pass-creds-1",
    "apiKey": "camel-api-key-777",
    "sessionid": "sess-0123456789",
}
VALUES = {  # credentials inside ordinary keys
    "db_url": ("postgresql://admin:pg-url-pass-1@db:5432/runs", "pg-url-pass-1"),
    "mlflow_uri": ("https://user:mlflow-pass-2@mlflow.example/", "mlflow-pass-2"),
    "conn": ("Server=db;Database=x;User Id=u;Password=conn-pass-3;", "conn-pass-3"),
    "notify": ("https://discord.com/api/webhooks/123/discord-hook-secret", "discord-hook-secret"),
    "endpoint": ("https://api.example/v1?token=query-tok-4&x=1", "query-tok-4"),
    "header": ("Bearer bearer-secret-5abcdefgh", "bearer-secret-5abcdefgh"),
    "note": ("use ghp_abcdefghijklmnopqrstuvwxyz0123 for the repo", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
    "jwt": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N", "dozjgNryP4J3jVmNHl0w5N"),
}
ORDINARY = {
    "ppo_max_token_len_per_gpu": 16384,
    "max_num_batched_tokens": 8192,
    "max_tokens": 512,
    "tokenizer": "Qwen/Qwen2.5-7B",
    "author": "rl-team",
    "pad_token": "<pad>",
    "max_prompt_length": 1024,
    "total_training_steps": 100,
    "key_frames": 4,
    "monkey": "banana",
}


class _Opaque:
    def __repr__(self) -> str:
        return "Opaque(password='repr-leak-6')"


def test_r2_07_run_config_secrets_never_reach_the_api_or_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv = start_server(tmp_path)
    try:
        deep: dict = {"password": "deep-secret-7"}
        for i in range(14):
            deep = {f"l{i}": deep}
        config = {"trainer": {**SECRETS, **{k: v for k, (v, _) in VALUES.items()}, **ORDINARY},
                  "wandb": {"key": "wandb-key-8-abcdef", "entity": "team"},
                  "env": [{"name": "HF_TOKEN", "value": "k8s-env-secret-9"}, {"name": "PATH", "value": "/usr/bin"}],
                  "argv": ["train.py", "--token", "cli-token-10", "--api-key=cli-key-11", "--lr", "1e-6"],
                  "obj": _Opaque(), "deep": deep}
        monkeypatch.setenv("RL_INSIGHT_SERVER_URL", srv.url)
        rl_insight.init(project="secrets", experiment_name="e", config=config)
        rl_insight.metric_gauge("x", 1.0)
        assert rl_insight.flush(10)
        run = next(r for r in httpx.get(srv.url + "/api/v1/runs").json()["runs"] if r["project"] == "secrets")
        stored = httpx.get(f"{srv.url}/api/v1/runs/{run['id']}").json()["config"]
        text = json.dumps(stored) + (tmp_path / "data" / "runstore.sqlite").read_bytes().decode("latin-1")
        leaked = [
            v
            for v in [
                *SECRETS.values(),
                *(s for _, s in VALUES.values()),
                "wandb-key-8-abcdef",
                "k8s-env-secret-9",
                "cli-token-10",
                "cli-key-11",
                "repr-leak-6",
                "deep-secret-7",
            ]
            if v in text
        ]
        assert not leaked
        for k, v in ORDINARY.items():
            assert stored[f"trainer.{k}"] == v, k
        assert stored["env.1.value"] == "/usr/bin" and stored["wandb.entity"] == "team" and stored["obj"] == "<_Opaque>"
    finally:
        rl_insight.finish(timeout=2)
        srv.stop()


def test_r2_07_the_server_redacts_what_a_client_did_not(server) -> None:
    batch = {
        "v": 1,
        "client": {
            "id": "old",
            "project": "p",
            "experiment_name": "raw",
            "run": {
                "config": {
                    "trainer.hf_token": "hf_rawrawrawrawrawrawrawrawraw12",
                    "trainer.lr": 0.1,
                    "data.url": "mysql://root:raw-pass-12@db/x",
                },
                "tags": [],
            },
        },
        "series": [{"k": "g", "n": "x", "l": {"project": "p", "experiment_name": "raw"}}],
        "samples": [[0, time.time(), 1, 1.0]],
    }
    assert httpx.post(server.url + "/api/v1/ingest", json=batch).status_code == 200
    run = next(r for r in httpx.get(server.url + "/api/v1/runs").json()["runs"] if r["experiment_name"] == "raw")
    config = httpx.get(f"{server.url}/api/v1/runs/{run['id']}").json()["config"]
    assert config == {"trainer.hf_token": "***", "trainer.lr": 0.1, "data.url": "mysql://root:***@db/x"}


# ---------------------------------------------------------------------------------------------------- case 8
def test_r2_08_rewards_at_both_ends_of_the_float_range_still_bin() -> None:
    from rl_insight.server.runstore.trajectories.queries import _histogram

    h = _histogram([1.7e308, -1.7e308, 0.0])
    json.dumps(h, allow_nan=False)  # served as JSON: no inf, no NaN
    assert sum(h["counts"]) == 3 and h["edges"][0] == -1.7e308 and h["edges"][-1] == 1.7e308


# ---------------------------------------------------------------------------------------------------- case 9, 19, 21
@pytest.mark.socket  # (the analysis runs in a child process)
def test_r2_09_a_failing_analysis_ends_failed_and_a_huge_rank_is_not_a_rank(tmp_path: Path) -> None:
    book = _book(tmp_path)
    rid = book.create("p", "e", 1, 1)["id"]
    doc = {"distributedInfo": {"rank": 2**70}, "baseTimeNanoseconds": 2**70, "traceEvents": [ANNOTATION]}
    _upload(book, rid, gzip.compress(json.dumps(doc).encode()))
    book.analysis.run_one(rid)
    a = book.get(rid)["analysis"]
    assert a["state"] == "done", a  # read on its own clock, the rank taken from the file name
    assert any("baseTimeNanoseconds" in p for p in a["problems"])
    broken = book.create("p", "e", 2, 2)["id"]
    _upload(book, broken, gzip.compress(b"{ not a trace at all"))
    book.analysis.run_one(broken)
    b = book.get(broken)["analysis"]
    assert b["state"] == "failed" and str(tmp_path) not in json.dumps(b)  # case 21: no server paths in messages


@pytest.mark.socket  # (the analysis runs in a child process)
def test_r2_19_a_memory_snapshot_uploaded_alone_is_analysed(tmp_path: Path) -> None:
    from tests.unit.analysis.test_memory_analysis import _snapshot

    book = _book(tmp_path)
    rid = book.create("p", "e", 1, 1)["id"]
    _upload(book, rid, pickle.dumps(_snapshot(1_790_000_000_000_000)), name="actor_rank0_pid7_20261130120000123.pickle")
    book.analysis.run_one(rid)
    a = book.get(rid)["analysis"]
    assert a["state"] == "done" and a["memory"] is True and "memory.csv" in a["files"]
    assert book.report_file(rid, "memory.csv").read_text().count("\n") >= 4


# ---------------------------------------------------------------------------------------------------- case 10
def test_r2_10_one_span_at_1970_does_not_stretch_the_runs_window(server) -> None:
    now = time.time_ns()
    spans = [
        {
            "id": f"s{i}",
            "name": "rollout",
            "lane": "replica_0",
            "kind": "state",
            "start_ns": now - (10 - i) * 10**9,
            "end_ns": now - (9 - i) * 10**9,
            "attributes": {"project": "p", "experiment_name": "clock"},
        }
        for i in range(5)
    ]
    spans.append({"id": "early", "name": "rollout", "lane": "replica_1", "kind": "state", "start_ns": 1, "end_ns": 2,
                  "attributes": {"project": "p", "experiment_name": "clock"}})
    batch = {"v": 1, "client": {"id": "c", "project": "p", "experiment_name": "clock"}, "spans": spans}
    assert httpx.post(server.url + "/api/v1/ingest", json=batch).status_code == 200
    run = next(r for r in httpx.get(server.url + "/api/v1/runs").json()["runs"] if r["experiment_name"] == "clock")
    assert run["first_seen"] > time.time() - 3600  # not 1970
    body = httpx.get(f"{server.url}/api/v1/runs/{run['id']}/spans").json()
    assert body["to_ns"] - body["from_ns"] < 3600 * 10**9
    assert body["left_out"]["spans"] == 1 and "from_ns" in body["left_out"]["why"]
    everything = httpx.get(f"{server.url}/api/v1/runs/{run['id']}/spans", params={"from_ns": 0, "to_ns": now}).json()
    assert body["left_out"]["before_ns"] > 2 and '"early"' in json.dumps(
        everything
    )  # still stored, and shown when asked


# ---------------------------------------------------------------------------------------------------- case 11
def test_r2_11_unfinished_headers_are_timed_out_and_connections_bounded(tmp_path: Path) -> None:
    url, proc = _server_process(tmp_path, header_timeout_s=1.0, max_connections=64)
    port = int(url.rsplit(":", 1)[1])
    socks: list[socket.socket] = []
    socks_extra: list[socket.socket] = []
    try:
        for _ in range(40):  # unfinished headers, never completed
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le")
            socks.append(s)
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200  # still answering meanwhile
        extra = [
            socket.create_connection(("127.0.0.1", port)) for _ in range(40)
        ]  # past max_connections: closed at once
        socks_extra = extra
        closed = sum(1 for s in extra if _closed(s, 2))
        assert closed >= 40 - (64 - 40) - 1  # all but the 24 that fit (one more if /healthz's connection is still open)
        answers = [_read(s, 5) for s in socks]  # after header_timeout_s every one is answered 408 and closed
        assert all(a.startswith(b"HTTP/1.1 408") for a in answers), answers[:3]
        assert httpx.get(url + "/healthz", timeout=5).status_code == 200

        def closed_by() -> dict[str, float]:  # the guard's counts on /metrics
            return {m.group(1): float(m.group(2)) for m in re.finditer(
                r'^rl_insight_server_connections_closed_total\{why="(\w+)"\} (\S+)', httpx.get(url + "/metrics").text,
                re.M)}

        # every connection that was held timed out (the 40 and the extras that fit), the rest were refused
        counts = wait_until(lambda: (c := closed_by())["header_timeout"] == 80 - closed and c, timeout=10,
                            what="the header timeouts counted")
        assert counts["max_connections"] == closed
        assert counts["body_timeout"] == 0
    finally:
        for s in socks + socks_extra:
            s.close()
        proc.terminate()
        proc.wait(15)


def _closed(s: socket.socket, timeout: float) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def _read(s: socket.socket, timeout: float) -> bytes:
    s.settimeout(timeout)
    try:
        return s.recv(200)
    except (socket.timeout, ConnectionResetError) as exc:
        return repr(exc).encode()


# ---------------------------------------------------------------------------------------------------- case 12, 13
def test_r2_12_placeholders_are_filled_in_one_pass() -> None:
    from rl_insight.semantics import panels

    sel = 'project="acme<W>", experiment_name="x<SEL>"'
    assert panels.render("rate(m{<SEL>}[<W>])", sel, "4s") == 'rate(m{project="acme<W>", experiment_name="x<SEL>"}[4s])'


def test_r2_13_otlp_json_with_attributes_as_an_object_is_not_a_500(server) -> None:
    body = {"resourceSpans": [{"resource": {"attributes": {"service.name": "x"}}, "scopeSpans": [{"spans": [
        {"traceId": "0" * 32, "spanId": "1" * 16, "name": "s", "startTimeUnixNano": "1790000000000000000",
         "endTimeUnixNano": "1790000001000000000", "attributes": {"a": 1}}]}]}]}
    r = httpx.post(server.url + "/v1/traces", json=body)
    assert r.status_code == 200, r.text


# ---------------------------------------------------------------------------------------------------- case 14, 15, 17
def test_r2_14_an_upload_keeps_its_total_and_refuses_empty_chunks(tmp_path: Path) -> None:
    book = _book(tmp_path)
    rid = book.create("p", "e", 1, 1)["id"]
    data = gzip.compress(json.dumps({"traceEvents": [ANNOTATION] * 50}).encode())
    book.upload(rid, NAME, 0, len(data), data[:10])
    with pytest.raises(InvalidInputError, match="declared as"):
        book.upload(rid, NAME, 10, 20, data[10:20])  # the total shrinks: would complete a truncated file
    with pytest.raises(InvalidInputError, match="empty chunk"):
        book.upload(rid, NAME, 10, len(data), b"")
    assert book.upload(rid, NAME, 10, len(data), data[10:])["complete"] is True


def test_r2_15_disk_per_request_expired_requests_and_unknown_runs_are_bounded(tmp_path: Path, monkeypatch) -> None:
    known: set[tuple[str, str]] = {("p", "e")}
    book = _book(tmp_path, run_exists=lambda p, e: (p, e) in known)
    rid = book.create("p", "e", 1, 1, max_bytes=1000)["id"]
    for i in range(16):
        book.upload(rid, f"f{i}.json.gz", 0, 1000, b"x")  # sixteen files declared at the per-file cap...
    with pytest.raises(PayloadTooLargeError, match="would pass its limit"):
        book.upload(rid, "f16.json.gz", 0, 1000, b"x")  # ...and the request is full
    short = book.create("p", "e", 2, 2, ttl_s=1)["id"]
    real = time.time
    monkeypatch.setattr("rl_insight.server.rooms.profiles.book._now", lambda: real() + 5)
    with pytest.raises(ConflictError, match="expired"):
        book.upload(short, NAME, 0, 10, b"x")
    monkeypatch.setattr("rl_insight.server.rooms.profiles.book._now", real)
    ghosts = [book.create("nobody", f"e{i}", 1, 1, ttl_s=1)["id"] for i in range(64)]
    with pytest.raises(ConflictError, match="have not sent data yet"):
        book.create("nobody", "e64", 1, 1)
    monkeypatch.setattr("rl_insight.server.rooms.profiles.book._now", lambda: real() + 2 * 86400)
    assert book.sweep() == len(ghosts)  # ended, a day past expiry, and their runs never came: deleted
    assert not any((tmp_path / "profiles" / g).exists() for g in ghosts) and book.get(rid)["id"] == rid


def test_r2_16_17_status_reports_are_appended_validated_and_replayed(tmp_path: Path) -> None:
    book = _book(tmp_path)
    rid = book.create("p", "e", 1, 1)["id"]
    before = (tmp_path / "profiles" / rid / "request.json").stat().st_mtime_ns
    for pid in range(300):
        reply = book.report(rid, {"state": "armed", "process": {"host": "h", "pid": pid, "rank": pid}})
        assert set(reply) == {"id", "state", "process"}  # one process, never the whole request
    assert (tmp_path / "profiles" / rid / "request.json").stat().st_mtime_ns == before  # not rewritten per report
    assert len((tmp_path / "profiles" / rid / JOURNAL).read_text().splitlines()) <= 300
    for window in ({"start_ns": 2**70, "end_ns": 2**71}, {"start_ns": 5, "end_ns": 1}, {"start_ns": -1, "end_ns": 3},
                   {"start_ns": 1, "end_ns": 2, "steps": list(range(100))}):
        with pytest.raises(InvalidInputError):
            book.report(rid, {"state": "uploaded", "process": {"host": "h", "pid": 1}, "window": window})
    with pytest.raises(InvalidInputError, match="rank"):
        book.report(rid, {"state": "armed", "process": {"host": "h", "pid": 1, "rank": 2**70}})
    book.report(rid, {"state": "uploaded", "process": {"host": "h", "pid": 7}, "window": {"start_ns": 1, "end_ns": 2}})
    again = _book(tmp_path)  # a restart replays the journal
    procs = again.get(rid)["processes"]
    assert len(procs) == 300 and procs["h:7"]["state"] == "uploaded" and procs["h:7"]["window"]["end_ns"] == 2


def test_r2_16_a_request_written_before_the_journal_keeps_its_processes(tmp_path: Path) -> None:
    book = _book(tmp_path)
    rid = book.create("p", "e", 1, 1)["id"]
    f = tmp_path / "profiles" / rid / "request.json"
    old = json.loads(f.read_text())  # as the version before the journal wrote it: processes inside request.json
    old["processes"] = {
        "h:1": {
            "host": "h",
            "pid": 1,
            "rank": 0,
            "lanes": [],
            "roles": [],
            "state": "armed",
            "message": "",
            "updated_at": 0,
        }
    }
    f.write_text(json.dumps(old))
    _book(tmp_path).cancel(rid)  # a save after the upgrade
    assert list(_book(tmp_path).get(rid)["processes"]) == ["h:1"]


# ---------------------------------------------------------------------------------------------------- case 18
def test_r2_18_export_names_never_share_a_directory_and_wandb_errors_are_clear(monkeypatch) -> None:
    from rl_insight.errors import ConfigError
    from rl_insight.export import run_dir_name, wandb_writer

    dirs = {run_dir_name("team", n) for n in ("team/x", "team_x", "team\\x", "team:x")}
    assert len(dirs) == 4 and all("/" not in d.split("/", 1)[1] for d in dirs)
    assert len(run_dir_name("p", "x" * 5000).split("/")[1]) <= 96

    class FakeWandb:
        class Settings:
            def __init__(self, **kw: object) -> None:
                pass

        @staticmethod
        def init(**kw: object) -> None:
            assert "/" not in str(kw["project"]) and len(str(kw["project"])) <= 128
            raise RuntimeError("invalid entity")

    monkeypatch.setattr(wandb_writer, "_import", lambda: FakeWandb)
    with pytest.raises(ConfigError, match="W&B refused the run a/b#c/d"):
        wandb_writer.WandbRun("a/b#c", "d")


# ---------------------------------------------------------------------------------------------------- "next" (suite
# flake)
def test_next_is_the_first_step_every_process_hears_of_before_it_begins() -> None:
    from rl_insight.server.live.step_clock import StepClock

    clock = StepClock()
    for step in range(1, 6):
        clock.note("p", "e", step, 1000.0 + 3.0 * step)  # a step every 3 s; step 5 logged at 1015
    assert clock.first_step_starting_after("p", "e", 1015.5, now=1015.5) == 7  # 6 is running; 7 begins at 1018
    # heard within 11 s: step 10 begins at 1027
    assert clock.first_step_starting_after("p", "e", 1015.5 + 11.0, now=1015.5) == 10
    # a run stalled in step 6 since 1015: when it moves on, each step takes 3 s from now (1100) on
    assert clock.first_step_starting_after("p", "e", 1111.0, now=1100.0) == 11
    assert clock.first_step_starting_after("p", "other", 0) is None


def test_trajectory_sorts_in_the_schema_match_the_queries() -> None:
    from typing import get_args

    from rl_insight.server.runstore.trajectories import queries as tq

    assert set(get_args(tq.Sort)) == set(tq.SORTS)
