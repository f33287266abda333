"""The MCP (Model Context Protocol) face of memlane, built on the official ``mcp`` SDK.

Seven tools (``memory_search``, ``memory_store``, ``memory_get``, ``memory_list``,
``memory_modify``, ``memory_forget``, ``memory_feedback``) are defined once, in
:mod:`memlane.mcp.server`, over a small :class:`~memlane.mcp.server.Backend` protocol with two
implementations:

* :class:`~memlane.mcp.local.LocalBackend`: in-process, over the services of an open
  :class:`~memlane.container.Container`. The daemon serves it as streamable HTTP at ``/mcp``
  (:func:`memlane.mcp.http.mount`).
* :class:`~memlane.mcp.stdio.HttpBackend`: a client of the daemon's HTTP API. ``memlane mcp
  serve`` (:func:`memlane.mcp.stdio.run_stdio`) is spawned by the agent once per session, while
  the daemon owns the database, so the stdio server never opens the database itself.

Every failure a caller can cause comes back as a tool error (``isError: true``) whose text says
what was wrong; the session never crashes.
"""
