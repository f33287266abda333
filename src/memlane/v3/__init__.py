"""Memory System V3 (issue 42): typed, scoped memories with provenance and trust fields, and the
co-access graph of a project's files. See docs/v3.md."""
