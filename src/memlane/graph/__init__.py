"""The knowledge graph of memory-pipeline-v2.md: entities, relations, aspects, attributes.

Modules:

* ``names``: canonical names, query tokens and n-grams.
* ``store``: persistence rules; ``persist_extraction`` for the extraction pipeline.
* ``linker``: the inline entity linker (regex, inside the remember transaction).
* ``protection``: decision auto-protection (the 14-pattern battery).
* ``classify``: the ``structural_classify`` job handler (aspect + kind per attribute).
* ``aspects``: aspect feedback from session FTS hits, with decay; its polling worker.
* ``search``: graph-augmented recall (deadline-bounded one-hop boost) and expansion.

``memlane.container`` builds the linker hook, the boost and the two workers.

SQL lives in ``memlane.storage.graph``; the tables come from migration 0005.
"""

from memlane.graph.store import persist_extraction

__all__ = ["persist_extraction"]
