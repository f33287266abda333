"""Document ingest (memory-pipeline-v2.md "Document Ingest", "URL Fetcher").

Modules:

* :mod:`memlane.documents.fetcher` -- ``fetch_url``: http(s) GET with a deadline, a size cap,
  content-type guards, limited redirects; HTML to text and title.
* :mod:`memlane.documents.chunking` -- ``chunk_text``: overlapping windows at sensible breaks.
* :mod:`memlane.documents.service` -- ``DocumentService``: create/list/get/delete documents and
  the ``document_ingest`` job handler that writes chunk memories.
"""
