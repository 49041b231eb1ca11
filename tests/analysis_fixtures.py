"""Inputs for the offline analysis tests: real torch traces (torch CPU, 2 gloo ranks, verl stage names,
both verl layouts) and nsys / Ascend files built from their schemas (upstream-offline.md §8)."""

from __future__ import annotations

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

TORCH_SCRIPT = r'''
import os, sys, time, torch, torch.distributed as dist, torch.multiprocessing as mp
from pathlib import Path

def work(rank, world, root, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"; os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    m = torch.nn.Linear(64, 64); opt = torch.optim.SGD(m.parameters(), lr=0.1)
    pid, ts = os.getpid(), time.strftime("%Y%m%d%H%M%S000")
    for layout in ("legacy", "flat"):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            with torch.profiler.record_function("actor_compute_log_prob"):
                for j in range(2):
                    with torch.profiler.record_function(f"micro_batch{j}"):
                        m(torch.randn(64, 64)).sum()
            with torch.profiler.record_function("actor_update"):
                with torch.profiler.record_function("mini_batch0"):
                    loss = m(torch.randn(64, 64)).sum(); loss.backward()
                    for p in m.parameters():
                        dist.all_reduce(p.grad)
                    opt.step()
                if rank == 1:
                    time.sleep(0.02)  # rank 1 is the straggler
        if layout == "legacy":
            d = Path(root, "legacy", "actor_rollout_ref"); d.mkdir(parents=True, exist_ok=True)
            out = d / f"prof_rank-{rank}_{pid}_{ts}.json.gz"
        else:
            d = Path(root, "flat"); d.mkdir(parents=True, exist_ok=True)
            out = d / f"actor-rollout-ref_actor-update_step2_rank{rank}-of-{world}_pid{pid}_{ts}.json.gz"
        prof.export_chrome_trace(str(out))
    dist.destroy_process_group()

def rollout(root):
    # a rollout replica's trace: no torch.distributed (no distributedInfo), replica from the directory
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with torch.profiler.record_function("vllm_generate"):
            torch.randn(128, 128) @ torch.randn(128, 128)
            time.sleep(0.01)
    d = Path(root, "legacy", "agent_loop_rollout_replica_0"); d.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(d / f"host_{os.getpid()}.{time.time_ns()}.pt.trace.json.gz"))
    (d / "host_1.async_llm.pt.trace.json.gz").write_bytes(b"decoy")  # vLLM front-end traces are skipped

if __name__ == "__main__":
    root, port = sys.argv[1], int(sys.argv[2])
    mp.spawn(work, args=(2, root, port), nprocs=2)
    rollout(root)
'''


def make_torch_traces(root: Path, port: int) -> None:
    """Real traces of a 2-rank gloo job. `port` is the rendezvous port; it was free when picked, but another
    process may take it before torch binds it (an ephemeral source port of any outgoing connection): then the job
    is run again on a fresh one, as after an abort in torch's teardown; three failures raise with the job's stderr."""
    import shutil
    import subprocess

    from tests.conftest import free_port

    script = root / "make_traces.py"
    script.write_text(TORCH_SCRIPT)
    for attempt in range(3):
        for old in root.iterdir():  # what a failed attempt wrote (a job that aborts at exit has written its traces)
            if old != script:
                shutil.rmtree(old) if old.is_dir() else old.unlink()
        r = subprocess.run([sys.executable, str(script), str(root), str(port)], capture_output=True, text=True,
                           timeout=300)
        if r.returncode == 0:
            return
        if attempt == 2:
            raise AssertionError(f"the torch trace job failed 3 times (exit {r.returncode}): {r.stderr[-3000:]}")
        # again on a fresh port: its port taken before torch bound it, or torch's gloo teardown aborting at exit
        # ("terminate called without an active exception", seen in CI) — neither is what the tests examine
        port = free_port()


def make_nsys_sqlite(path: Path, rank: int, epoch_ns: int, ranges: list[tuple[str, int, int, int]]) -> Path:
    """ranges: (text, start_ns since session start, end_ns, eventType 59|60)."""
    c = sqlite3.connect(path)
    c.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, "end" INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
            category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
            domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
            int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT);
        CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT, label TEXT);
        CREATE TABLE ANALYSIS_DETAILS (globalVid INTEGER, duration INTEGER, startTime INTEGER, stopTime INTEGER);
        CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
        CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT);
        CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
    """)
    c.executemany("INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES (?, ?, ?)",
                  [(59, "NvtxPushPopRange", "NVTX PushPop Range"), (60, "NvtxStartEndRange", "NVTX Start/End Range"),
                   (75, "NvtxDomainCreate", "NVTX Domain Create")])
    c.execute("INSERT INTO ANALYSIS_DETAILS VALUES (0, 10000000000, 6600000000000000, 6600010000000000)")
    c.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (epoch_ns,))
    c.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_1:ENVIRONMENT_VARIABLE', ?)", (f'RANK="{rank}"',))
    c.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_1:ENVIRONMENT_VARIABLE', 'LOCAL_RANK=\"0\"')")
    tid = 0x1000000000000 + (4242 << 24) + 4242
    for i, (text, start, end, etype) in enumerate(ranges):
        if etype == 60:  # Python nvtx registers strings: textId set, text NULL
            c.execute("INSERT OR IGNORE INTO StringIds VALUES (?, ?)", (100 + i, text))
            c.execute('INSERT INTO NVTX_EVENTS (start, "end", eventType, rangeId, globalTid, textId, domainId) '
                      "VALUES (?, ?, 60, ?, ?, ?, 0)", (start, end, i, tid, 100 + i))
        else:
            c.execute(
                'INSERT INTO NVTX_EVENTS (start, "end", eventType, globalTid, text, domainId) VALUES (?, ?, 59, ?, '
                '?, 0)',
                (start, end, tid, text),
            )
    c.execute("INSERT INTO NVTX_EVENTS (start, eventType, text) VALUES (5, 75, 'verl')")  # a domain, not a range
    c.commit()
    c.close()
    return path


def sqlite_to_jsonl(db: Path, out: Path) -> Path:
    """What `nsys export --type jsonlines` writes: one object per row with its table, NULL columns omitted."""
    c = sqlite3.connect(db)
    lines = []
    for (table,) in c.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        cur = c.execute(f'SELECT * FROM "{table}"')
        cols = [d[0] for d in cur.description]
        for row in cur:
            lines.append(json.dumps({"table": table, **{k: v for k, v in zip(cols, row) if v is not None}}))
    c.close()
    out.write_text("\n".join(lines) + "\n")
    return out


def make_ascend_db(path: Path, ranges: list[tuple[str, int, int]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    c = sqlite3.connect(path)
    c.executescript("""
        CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT);
        CREATE TABLE MSTX_EVENTS (startNs INTEGER, endNs INTEGER, eventType INTEGER, rangeId INTEGER, category INTEGER,
            message INTEGER, globalTid INTEGER, endGlobalTid INTEGER, domainId INTEGER, connectionId INTEGER, depth INTEGER);
        CREATE TABLE ENUM_MSTX_EVENT_TYPE (id INTEGER PRIMARY KEY, name TEXT);
        CREATE TABLE SESSION_TIME_INFO (startTimeNs INTEGER, endTimeNs INTEGER);
        CREATE TABLE META_DATA (name TEXT, value TEXT);
    """)
    c.executemany("INSERT INTO ENUM_MSTX_EVENT_TYPE VALUES (?, ?)", [(0, "marker"), (1, "push/pop"), (2, "start/end"),
                                                                      (3, "marker_ex")])
    for i, (name, start, end) in enumerate(ranges):
        c.execute("INSERT INTO STRING_IDS VALUES (?, ?)", (1000 + i, name))
        c.execute("INSERT INTO MSTX_EVENTS VALUES (?, ?, 2, ?, 0, ?, 1, 1, 0, ?, 0)", (start, end, i, 1000 + i, i))
    c.execute("INSERT INTO MSTX_EVENTS VALUES (?, NULL, 0, NULL, 0, 999, 1, 1, 0, 0, 0)", (ranges[0][1],))  # a marker
    c.execute("INSERT INTO SESSION_TIME_INFO VALUES (?, ?)", (ranges[0][1] - 1000, ranges[-1][2] + 1000))
    c.commit()
    c.close()
    return path


def make_trace_view(path: Path, base_us: float, truncate: bool = False) -> Path:
    """A torch_npu text timeline: bare array, string `ts` in epoch µs, mstx and Overlap Analysis lanes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ev: list[dict] = [
        {"ph": "M", "name": "process_name", "pid": 10, "tid": 0, "args": {"name": "Python"}},
        {"ph": "M", "name": "process_name", "pid": 20, "tid": 0, "args": {"name": "MsTx"}},
        {"ph": "M", "name": "process_name", "pid": 30, "tid": 0, "args": {"name": "Overlap Analysis"}},
        {"ph": "M", "name": "thread_name", "pid": 30, "tid": 1, "args": {"name": "Computing"}},
        {"ph": "M", "name": "thread_name", "pid": 30, "tid": 2, "args": {"name": "Communication"}},
        {"ph": "M", "name": "thread_name", "pid": 30, "tid": 3, "args": {"name": "Communication(Not Overlapped)"}},
        {"ph": "X", "name": "actor_update", "pid": 20, "tid": 5, "ts": f"{base_us:.3f}", "dur": 10000.0, "args": {}},
        {
            "ph": "X",
            "name": "aten::mm",
            "cat": "cpu_op",
            "pid": 10,
            "tid": 5,
            "ts": f"{base_us + 5:.3f}",
            "dur": 3.0,
            "args": {"Call stack": "a.py(1): f;\r\nb.py(2): g"},
        },
        {"ph": "X", "name": "Computing", "pid": 30, "tid": 1, "ts": f"{base_us + 1000:.3f}", "dur": 6000.0, "args": {}},
        {
            "ph": "X",
            "name": "Communication",
            "pid": 30,
            "tid": 2,
            "ts": f"{base_us + 5000:.3f}",
            "dur": 4000.0,
            "args": {},
        },
        {
            "ph": "X",
            "name": "Communication(Not Overlapped)",
            "pid": 30,
            "tid": 3,
            "ts": f"{base_us + 7000:.3f}",
            "dur": 2000.0,
            "args": {},
        },
        {
            "ph": "X",
            "name": "ref_compute_log_prob",
            "pid": 20,
            "tid": 5,
            "ts": f"{base_us + 12000:.3f}",
            "dur": 3000.0,
            "args": {},
        },
    ]
    text = json.dumps(ev, indent=1)
    if truncate:
        text = text[: text.rfind('"ref_compute_log_prob"') + 10]  # cut inside the last event, no closing bracket
    path.write_text(text)
    (path.parent.parent / "profiler_info_3.json").write_text(
        json.dumps(
            {
                "config": {},
                "start_info": {},
                "end_info": {},
                "torch_npu_version": "2.5",
                "cann_version": "8.0",
                "rank_id": 3,
            }
        )
    )
    return path


VERL_LOG = """\
python3 -m verl.trainer.main_ppo trainer.logger=['console']
(TaskRunner pid=1234) step:1 - training/global_step:1 - training/epoch:0 - actor/entropy:1.1 - actor/loss:0.02 - timing_s/gen:12.5 - timing_s/update_actor:4.0 - timing_s/step:20.1 - critic/score/mean:0.2
(TaskRunner pid=1234) Training Progress:  10%|█         | 1/10
(TaskRunner pid=1234) step:2 - training/global_step:2 - training/epoch:0 - actor/entropy:1.0 - actor/loss:0.01 - timing_s/gen:11.5 - timing_s/update_actor:4.2 - timing_s/step:19.0 - critic/score/mean:0.25 - note:abc
step:3 - training/global_step:3 - training/epoch:0 - actor/entropy:0.9 - actor/loss:nan - timing_s/gen:13.5 - timing_s/update_actor:4.4 - timing_s/step:21.5 - critic/score/mean:0.3
"""


def now_ns() -> int:
    return time.time_ns()


def env_port() -> int:
    return int(os.environ.get("RL_INSIGHT_TEST_PORT", "0"))
