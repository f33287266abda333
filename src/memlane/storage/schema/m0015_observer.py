"""0015: the observer's scratchpad (docs/v3.md; seed memory-system-v3-design.md section 5 and its open question 1).

* ``observer_events``: one row per tool call the agent made (written as it arrives, so a daemon
  kill loses nothing): the session, its step number, the tool, the file it touched (if any),
  whether it changed the file, the error's hash and text when the call failed, and the time (ms).
* ``observer_signals``: the signals derived from the events as they arrive: ``file_access``,
  ``co_access``, ``error_retry``, ``backtrack``, ``sequence``, ``time_anomaly`` (JSON ``data``);
  ``processed`` marks those a promotion has consumed.
"""

NAME = "0015_observer"

SQL = """
CREATE TABLE observer_events (
    id          INTEGER PRIMARY KEY,
    session_key TEXT NOT NULL,
    project     TEXT,
    step        INTEGER NOT NULL,
    tool_name   TEXT NOT NULL,
    file_path   TEXT,
    is_edit     INTEGER NOT NULL DEFAULT 0,
    error_hash  TEXT,
    error_text  TEXT,
    ts_ms       INTEGER NOT NULL,
    UNIQUE(session_key, step)
);
CREATE INDEX idx_observer_events_project ON observer_events(project, session_key);

CREATE TABLE observer_signals (
    id          INTEGER PRIMARY KEY,
    session_key TEXT NOT NULL,
    project     TEXT,
    step        INTEGER NOT NULL,
    signal_type TEXT NOT NULL CHECK (signal_type IN
                  ('file_access','co_access','error_retry','backtrack','sequence','time_anomaly')),
    data        TEXT NOT NULL,
    processed   INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL
);
CREATE INDEX idx_observer_signals_session ON observer_signals(session_key, signal_type);
CREATE INDEX idx_observer_signals_project ON observer_signals(project, signal_type);
"""
