"""memlane: a local-first memory daemon for AI agents.

Layers (each a sub-package):
    storage/    SQL only: connections, the single writer, migrations, repositories.
    embedding/  the Embedder protocol and its providers (local ONNX, Ollama, OpenAI-compatible).
    recall/     hybrid recall: BM25 leg, vector leg, merge, boosts.
    services/   the behaviour: remember, recall, update, delete, recover, history.
    api/        the FastAPI daemon (thin).
    cli/        the typer CLI (thin).
    bench/      benchmark commands (LoCoMo retrieval, latency).
"""

__version__ = "0.1.0"
