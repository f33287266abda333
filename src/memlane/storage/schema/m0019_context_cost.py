"""0019: context-cost samples (docs/v3.md, "Context cost"; seed memory-system-v3-design.md sections 4,
5 and 13: ``context_cost``, "Session context tokens tracked via finish event", "Rolling window: retain
the last 30 sessions of data per module").

* ``observer_events.payload_chars``: the size of the hook input Claude Code sent for the call
  (characters: the call's input and output, plus its few fixed fields).
* ``observer_steps.context_tokens``: the context size when the step ended, from the transcript's
  latest assistant message (``message.usage``: input + cache creation + cache read + output tokens).
* ``context_cost_samples``: one sample per project, module (a directory the session touched) and
  session: the session's context tokens and how they were measured (``transcript``: the largest
  context size its Stop hooks read; ``tool_io``: its hook inputs' characters / 4).
"""

NAME = "0019_context_cost"

SQL = """
ALTER TABLE observer_events ADD COLUMN payload_chars INTEGER;
ALTER TABLE observer_steps ADD COLUMN context_tokens INTEGER;

CREATE TABLE context_cost_samples (
    project     TEXT NOT NULL,
    module      TEXT NOT NULL,
    session_key TEXT NOT NULL,
    tokens      INTEGER NOT NULL CHECK (tokens >= 0),
    basis       TEXT NOT NULL CHECK (basis IN ('transcript', 'tool_io')),
    created_at  TEXT NOT NULL,
    PRIMARY KEY (project, module, session_key)
);
CREATE INDEX idx_context_cost_module ON context_cost_samples(project, module, created_at);
"""
