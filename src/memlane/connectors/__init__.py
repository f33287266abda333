"""Connectors: glue between agent harnesses and the memlane daemon's hook endpoints.

Modules:

* ``events``: :class:`~memlane.connectors.events.HookEvent`, the harness-neutral hook event,
  and ``from_claude_code`` which maps Claude Code's hook stdin JSON onto it.
* ``transcript``: the guarded transcript reader (only regular files under allowed roots,
  size-capped) and the JSONL helpers ``transcript_text`` / ``last_memory_feedback``.
* ``spool``: the fail-open on-disk spool (``$MEMLANE_HOME/spool/``) for events the daemon
  could not take, and ``replay_spool`` to deliver them later.
* ``claude_code``: ``run_hook`` (what a ``memlane hook <event>`` command does), and
  ``connect`` / ``disconnect`` (re-exported from ``claude_settings``).
* ``claude_settings``: the careful editor of Claude Code's ``~/.claude/settings.json`` hooks
  and of the user-scope MCP server entry in ``~/.claude.json`` (backup, atomic write,
  idempotent, removes only memlane's entries).

Nothing here prints; the CLI (``memlane.cli.hooks``) prints what these return.
"""
