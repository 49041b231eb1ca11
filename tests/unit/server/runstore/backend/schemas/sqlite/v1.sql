-- run store schema version 1, as rl-insight 5312f49585 created it
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    project TEXT NOT NULL,
    experiment_name TEXT NOT NULL,
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    last_step REAL,
    finished_at REAL,
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
CREATE INDEX spans_by_lane ON spans (run_id, lane, start_ns);
CREATE INDEX spans_by_start ON spans (run_id, start_ns);
CREATE INDEX spans_open ON spans (run_id) WHERE end_ns IS NULL;
