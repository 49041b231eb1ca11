-- run store schema version 2, as rl-insight 9a0e0f2c8c created it
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
    UNIQUE (project, experiment_name)
);
CREATE TABLE series (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    labels TEXT NOT NULL,
    UNIQUE (run_id, name, kind, labels)
);
CREATE TABLE samples (
    series_id INTEGER NOT NULL,
    step REAL,
    ts REAL NOT NULL,
    value REAL
);
CREATE INDEX samples_by_step ON samples (series_id, step);
CREATE INDEX samples_by_ts ON samples (series_id, ts);
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
CREATE INDEX step_stats_by_time ON step_stats (run_id, start_ns);
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
CREATE INDEX spans_by_lane_cover ON spans (run_id, lane, start_ns, end_ns, kind, name);
CREATE INDEX spans_by_start ON spans (run_id, start_ns);
CREATE INDEX spans_open ON spans (run_id) WHERE end_ns IS NULL;
