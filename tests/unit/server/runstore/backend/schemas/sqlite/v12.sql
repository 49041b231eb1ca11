-- run store schema version 12, as rl-insight 5c4390a80a created it
CREATE TABLE runs (
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
CREATE TABLE series (
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
CREATE TABLE samples (
    series_id INTEGER NOT NULL,
    step REAL,
    ts REAL NOT NULL,
    value REAL
);
CREATE TABLE spans (
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
CREATE TABLE step_marks (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    step INTEGER NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (run_id, name, step)
) WITHOUT ROWID;
CREATE TABLE step_stats (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    step INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    lane TEXT NOT NULL,
    name TEXT NOT NULL,
    value REAL NOT NULL,
    PRIMARY KEY (run_id, step, lane, name)
) WITHOUT ROWID;
CREATE TABLE step_blocks (
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
CREATE TABLE step_summaries (
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    first_step INTEGER NOT NULL,
    start_ns INTEGER NOT NULL,
    end_ns INTEGER NOT NULL,
    PRIMARY KEY (run_id, kind, first_step)
) WITHOUT ROWID;
CREATE TABLE trajectories (
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
CREATE TABLE turns (
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
CREATE TABLE llm_requests (
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
CREATE TABLE fleet_clients (
    client_id TEXT PRIMARY KEY,
    server TEXT NOT NULL,
    project TEXT,
    experiment_name TEXT,
    last_seen REAL NOT NULL,
    process TEXT
);
CREATE TABLE fleet_records (
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
CREATE TABLE span_lod (
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
CREATE TABLE span_lod_dirty (
    run_id INTEGER NOT NULL,
    lane TEXT NOT NULL,
    level INTEGER NOT NULL,
    bucket_ns INTEGER NOT NULL,
    generation INTEGER NOT NULL,
    PRIMARY KEY (run_id, lane, level, bucket_ns)
) WITHOUT ROWID;
CREATE TABLE series_parts (
    series_id INTEGER NOT NULL,
    client TEXT NOT NULL,
    value REAL NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (series_id, client)
);
CREATE UNIQUE INDEX samples_once ON samples (series_id, ts);
CREATE INDEX samples_by_step ON samples (series_id, step);
CREATE INDEX step_stats_by_time ON step_stats (run_id, start_ns);
CREATE INDEX trajectories_by_step ON trajectories (run_id, step, duration_s);
CREATE INDEX turns_by_request ON turns (request_id) WHERE request_id IS NOT NULL;
CREATE INDEX llm_requests_by_parent ON llm_requests (run_id, parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX spans_by_lane_cover ON spans (run_id, lane, start_ns, end_ns, kind, name);
CREATE INDEX spans_by_start ON spans (run_id, start_ns);
CREATE INDEX spans_open ON spans (run_id) WHERE end_ns IS NULL;
CREATE INDEX fleet_clients_by_run ON fleet_clients (project, experiment_name, last_seen);
CREATE INDEX fleet_records_changed ON fleet_records (kind, changed_at);
