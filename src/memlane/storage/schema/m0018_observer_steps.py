"""0018: the observer's work steps and call durations (docs/v3.md, "Work steps"; seed
memory-system-v3-design.md section 5, "Validation filter").

* ``observer_events.tool_use_id``: Claude Code's id of the call (pairs its PreToolUse with its
  PostToolUse); ``observer_events.duration_ms``: the call's time from its PreToolUse to its
  PostToolUse, when both were seen.
* ``observer_steps``: one row per work-step boundary of a session: the agent's turn ended
  (``stop``, Claude Code's Stop hook), a subagent finished (``subagent_stop``), or a Task tool
  call started or returned (``task``: the subagent's calls and the Task call form steps of their
  own). ``last_step`` is the session's last recorded tool call when the boundary came: the step
  covers the calls after the previous boundary up to it.
"""

NAME = "0018_observer_steps"

SQL = """
ALTER TABLE observer_events ADD COLUMN tool_use_id TEXT;
ALTER TABLE observer_events ADD COLUMN duration_ms INTEGER;

CREATE TABLE observer_steps (
    id          INTEGER PRIMARY KEY,
    session_key TEXT NOT NULL,
    project     TEXT,
    last_step   INTEGER NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('stop', 'subagent_stop', 'task')),
    agent_id    TEXT,
    agent_type  TEXT,
    ts_ms       INTEGER NOT NULL
);
CREATE INDEX idx_observer_steps_session ON observer_steps(session_key, last_step);
"""
