"""Methodology plugins and universal phases (docs/v3.md "Methodology plugins and phases")."""
