"""Schema migrations after 0002, one module each, found by ``memlane.storage.migrations.discover``.

A module ``mNNNN_short_name.py`` defines ``NAME = "NNNN_short_name"`` and ``SQL`` (a script of
statements; triggers allowed). Modules are applied sorted by module name, after the built-in
0001 and 0002. Never edit a shipped migration: add a new module. Reserved numbers: 0003
predictor, 0004 pipeline jobs, 0005 knowledge graph, 0006 documents, 0007 hints/maintenance.
"""
