"""Memory System V3 (docs/v3.md): typed, scoped memories with provenance and trust fields, and the
co-access graph of a project's files."""
