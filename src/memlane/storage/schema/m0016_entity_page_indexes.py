"""0016: indexes behind one entity's page (the dashboard's ``/knowledge/entities/{id}`` and
``GET /api/knowledge/entities/{id}``): its mentions and its attributes, newest first.

* ``memory_entity_mentions(entity_id, created_at DESC, memory_id)``: a page of an entity's
  mentions is read in order and stops at the page's end; with only ``(entity_id, memory_id)``
  every mention was read and sorted first.
* ``entity_attributes(entity_id, status, created_at DESC, id)``: the same for a page of its
  active attributes.

Measurements: docs/decisions.md, Indexes.
"""

NAME = "0016_entity_page_indexes"

SQL = """
CREATE INDEX IF NOT EXISTS idx_mentions_entity_created ON memory_entity_mentions(entity_id, created_at DESC, memory_id);
CREATE INDEX IF NOT EXISTS idx_attributes_entity_created ON entity_attributes(entity_id, status, created_at DESC, id);
"""
