"""The run store's tables, written once in SQLite's dialect (postgres.py types them for PostgreSQL): what a fresh
store of SCHEMA_VERSION holds. How an older store becomes this is migrations.py's one numbered list.

Invariants: `DDL` is every table and index of a fresh store, each `IF NOT EXISTS` (migrations create the tables a
version added from it); an index over a column that a migration adds is created after the migrations run (`indexes`);
`SAMPLES_ONCE` comes after a migration removed the copies an older store may hold, so it is not part of `DDL`.
"""

from __future__ import annotations

APPLICATION_ID = 0x524C4953  # "RLIS": marks the file as an rl-insight run store
SCHEMA_VERSION = 12
# 2: runs.config/tags (init(config=...)), runs.max_span_ns, step_stats, covering timeline index; 3: trajectories;
# 4: a sample is unique per (series, time), so a resend is stored once; 5: runs.end_state (how a run ended: a clean
# finish, or lost: the process logging its steps stopped reporting); 6: fleet_clients (several ingest servers on one
# store: which server each client process reports to now, server/fleet/registry.py); 7: fleet_records (what the
# servers of a fleet share besides runs: profile requests, stack snapshots, server/fleet/records.py) and
# fleet_clients.process (each client process as its server describes it: whom another server's snapshot asks);
# 8: span_lod (the timeline's level-of-detail summary, spans/span_lod.py), older spans' buckets marked to build;
# 9: series.n_samples and series.last_step (kept by the writer, read by the metrics list: metrics/series_totals.py);
# 10: series_parts and series.total (a counter's value per sending process, summed: runstore/metrics/series_parts.py);
# 11: series.logged_name (the name as the job logged it, `actor/entropy`, where it differs from the stored one);
# 12: step_marks (the step as one stored fact: when each step ended, by the run's step metric; step_marks.py)

FLEET_DDL = """
CREATE TABLE IF NOT EXISTS fleet_clients (
    client_id TEXT PRIMARY KEY,
    server TEXT NOT NULL,
    project TEXT,
    experiment_name TEXT,
    last_seen REAL NOT NULL,
    process TEXT
);
CREATE INDEX IF NOT EXISTS fleet_clients_by_run ON fleet_clients (project, experiment_name, last_seen);
"""

# a record (part '') and its parts ('process:HOST:PID', 'file:NAME'), each a JSON body; a record's version moves on
# every change of it (compare-and-set), a part's changed_at (unix seconds) tells the other servers what to read again
RECORDS_DDL = """
CREATE TABLE IF NOT EXISTS fleet_records (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    part TEXT NOT NULL,
    project TEXT,
    experiment_name TEXT,
    body TEXT NOT NULL,
    version INTEGER NOT NULL,
    changed_at REAL NOT NULL,
    PRIMARY KEY (kind, id, part)
);
CREATE INDEX IF NOT EXISTS fleet_records_changed ON fleet_records (kind, changed_at);
"""

# the timeline's level-of-detail summary (version 8, span_lod.py): items per run, lane, level and bucket of start
# time, and the buckets to build again
LOD_BUCKET_NS = 64 * 2**28  # a level-0 bucket: 64 of level 0's resolutions (0.27 s): span_lod.BUCKETS[0]
SPAN_LOD_DDL = """
CREATE TABLE IF NOT EXISTS span_lod (
    run_id INTEGER NOT NULL,
    lane TEXT NOT NULL,
    level INTEGER NOT NULL,
    bucket_ns INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    depth INTEGER NOT NULL,
    name TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    merged INTEGER NOT NULL,
    longest_ns INTEGER NOT NULL,
    span_id TEXT,
    PRIMARY KEY (run_id, lane, level, bucket_ns, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS span_lod_dirty (
    run_id INTEGER NOT NULL,
    lane TEXT NOT NULL,
    level INTEGER NOT NULL,
    bucket_ns INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    PRIMARY KEY (run_id, lane, level, bucket_ns)
) WITHOUT ROWID;
"""
# each sending process's own value of a counter (version 10, series_parts.py)
SERIES_PARTS_DDL = """
CREATE TABLE IF NOT EXISTS series_parts (
    series_id INTEGER NOT NULL,
    client TEXT NOT NULL,
    value REAL NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (series_id, client)
);
"""

DDL = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    project TEXT NOT NULL,
    experiment_name TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    last_step REAL,
    finished_at REAL,
    config TEXT,
    tags TEXT,
    max_span_ns INTEGER,
    end_state TEXT,
    UNIQUE (project, experiment_name)
);
CREATE TABLE IF NOT EXISTS series (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    labels TEXT NOT NULL,
    n_samples INTEGER NOT NULL DEFAULT 0,
    last_step REAL,
    total REAL,
    logged_name TEXT,
    UNIQUE (run_id, name, kind, labels)
);
CREATE TABLE IF NOT EXISTS samples (
    series_id INTEGER NOT NULL,
    step REAL,
    ts REAL NOT NULL,
    value REAL
);
CREATE INDEX IF NOT EXISTS samples_by_step ON samples (series_id, step);
CREATE TABLE IF NOT EXISTS spans (
    run_id INTEGER NOT NULL,
    id TEXT NOT NULL,
    trace_id TEXT,
    parent_id TEXT,
    name TEXT NOT NULL,
    lane TEXT NOT NULL,
    kind TEXT NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER,
    attributes TEXT NOT NULL,
    PRIMARY KEY (run_id, id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS step_marks (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    step INTEGER NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (run_id, name, step)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS step_stats (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    lane TEXT NOT NULL,
    name TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (run_id, step, lane, name)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS step_stats_by_time ON step_stats (run_id, start_ns);
CREATE TABLE IF NOT EXISTS step_blocks (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    first_step INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    lane TEXT NOT NULL,
    name TEXT NOT NULL,
    total REAL NOT NULL,
    mx REAL NOT NULL,
    PRIMARY KEY (run_id, first_step, lane, name)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS step_summaries (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    first_step INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    PRIMARY KEY (run_id, kind, first_step)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS trajectories (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    step INTEGER,
    info_step INTEGER,
    sample TEXT,
    rollout_n INTEGER,
    validate INTEGER,
    source TEXT,
    status TEXT,
    reward REAL,
    reported_turns INTEGER,
    info_start_ns INTEGER,
    info_end_ns INTEGER,
    start_ns INTEGER,
    end_ns INTEGER,
    duration_s REAL,
    turns INTEGER NOT NULL DEFAULT 0,
    generates INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    tool_errors INTEGER NOT NULL DEFAULT 0,
    tokens_in INTEGER,
    tokens_out INTEGER,
    generate_s REAL,
    tool_s REAL,
    replica TEXT,
    tools TEXT,
    UNIQUE (run_id, key)
);
CREATE INDEX IF NOT EXISTS trajectories_by_step ON trajectories (run_id, step, duration_s);
CREATE TABLE IF NOT EXISTS turns (
    traj INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    span_id TEXT NOT NULL,
    end_ns INTEGER NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    step INTEGER,
    replica TEXT,
    tokens_in INTEGER,
    tokens_out INTEGER,
    error TEXT,
    request_id TEXT,
    detail TEXT,
    PRIMARY KEY (traj, start_ns, span_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS turns_by_request ON turns (request_id) WHERE request_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS llm_requests (
    run_id INTEGER NOT NULL,
    request_id TEXT NOT NULL,
    parent_id TEXT,
    trace_id TEXT,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    replica TEXT,
    tokens_in INTEGER,
    tokens_out INTEGER,
    queue_s REAL,
    ttft_s REAL,
    prefill_s REAL,
    decode_s REAL,
    PRIMARY KEY (run_id, request_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS llm_requests_by_parent ON llm_requests (run_id, parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS spans_by_lane_cover ON spans (run_id, lane, start_ns, end_ns, kind, name);
CREATE INDEX IF NOT EXISTS spans_by_start ON spans (run_id, start_ns);
CREATE INDEX IF NOT EXISTS spans_open ON spans (run_id) WHERE end_ns IS NULL;
""" + FLEET_DDL + RECORDS_DDL + SPAN_LOD_DDL + SERIES_PARTS_DDL
# a sample is stored once per series and time (version 4): created after the copies an older store holds are gone
SAMPLES_ONCE = "CREATE UNIQUE INDEX IF NOT EXISTS samples_once ON samples (series_id, ts)"
# each series' sample count and last step (version 9), counted from its samples (series_totals.py keeps them)
SERIES_TOTALS_RECOUNT = ("UPDATE series SET n_samples = (SELECT count(*) FROM samples WHERE series_id = series.id), "
                         "last_step = (SELECT max(step) FROM samples WHERE series_id = series.id)")
# each counter's sum across its processes (version 10), from their parts (series_parts.py keeps it)
SERIES_PARTS_RECOUNT = ("UPDATE series SET total = (SELECT sum(value) FROM series_parts WHERE series_id = "
                        "series.id)")
# the step as one stored fact (version 12, step_marks.py's rule `mark_of` in SQL: a finite value within ±MAX_STEP,
# towards zero; each step at its earliest time): every stored run's steps of the default step metric from its samples
MAX_STEP = 2**53  # the largest integer a float holds exactly
_MARKS_FROM = ("FROM samples p JOIN series s ON s.id = p.series_id WHERE s.name = 'training_global_step' AND "
               f"p.value IS NOT NULL AND p.value BETWEEN -{MAX_STEP} AND {MAX_STEP} AND p.ts BETWEEN -1e300 AND 1e300")
STEP_MARKS_BACKFILL = (
    "INSERT INTO step_marks (run_id, name, step, ts) SELECT s.run_id, s.name, CAST(p.value AS INTEGER), min(p.ts) "
    f"{_MARKS_FROM} GROUP BY s.run_id, s.name, CAST(p.value AS INTEGER)",
    "INSERT INTO step_marks (run_id, name, step, ts) SELECT s.run_id, s.name, CAST(trunc(p.value) AS BIGINT), "
    f"min(p.ts) {_MARKS_FROM} GROUP BY s.run_id, s.name, CAST(trunc(p.value) AS BIGINT)")
# a store written before the timeline's summary (version 8): every level-0 bucket holding finished spans is marked to
# build (one scan, once); the writer's rebuilds catch up, and until then readers take those buckets from the spans
LOD_BACKFILL = (f"INSERT INTO span_lod_dirty (run_id, lane, level, bucket_ns, generation) SELECT DISTINCT run_id, "
                f"lane, 0, start_ns - ((start_ns % {LOD_BUCKET_NS}) + {LOD_BUCKET_NS}) % {LOD_BUCKET_NS}, 1 FROM spans "
                f"WHERE end_ns IS NOT NULL ON CONFLICT DO NOTHING")


def statements(ddl: str) -> list[str]:
    """`ddl`'s statements, one each."""
    return [s.strip() for s in ddl.split(";") if s.strip()]


def tables(ddl: str = DDL) -> list[str]:
    """The CREATE TABLE statements of `ddl`."""
    return [s for s in statements(ddl) if s.upper().startswith("CREATE TABLE")]


def indexes(ddl: str = DDL) -> list[str]:
    """The CREATE INDEX statements of `ddl`."""
    return [s for s in statements(ddl) if not s.upper().startswith("CREATE TABLE")]


