"""Memory drift and staleness (issue 41): references, prediction errors, retrieval rules,
file staleness, external signals and confidence propagation. See docs/drift.md."""
