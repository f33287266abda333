"""The wire format shared by the surfaces: the request and response models of the HTTP API and
the MCP tools (:mod:`memlane.schemas.models`) and the one JSON error shape
(:mod:`memlane.schemas.errors`). Both surfaces import these; neither imports the other."""
