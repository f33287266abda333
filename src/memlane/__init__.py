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

import os as _os

# numpy's OpenBLAS starts one spinning thread per core for every matrix product. memlane's
# products are small (a 100 x 384 similarity block, a 10k x 384 matvec), and on a small machine
# those threads fight onnxruntime and SQLite (docs/decisions.md, "Threads"): one BLAS thread
# unless the user set otherwise. Must run before numpy is imported.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

__version__ = "0.1.0"
