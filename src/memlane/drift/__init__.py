"""Memory drift and staleness (docs/drift.md): references, prediction errors, retrieval rules,
file staleness, external signals and confidence propagation."""
