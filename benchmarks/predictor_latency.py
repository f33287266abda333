"""``memlane bench predictor-latency``: scoring and training cost of the predictor.

* In process: one session of 100 candidates (384-d embeddings, logged signals) turned into
  features and scored, as the sidecar does per request (no JSON, no pipe).
* Through the sidecar: the daemon's own ``score`` request, built by the function the daemon
  uses (:func:`memlane.services.predictor_signals.score_params`: candidate ids and logged
  signals, the context vector as base64; the sidecar reads the candidates' vectors and texts
  from its read-only connection), over the stdio pipe, timed at the client (encode, pipe,
  parse, row read, score, reply, decode).
* ``train_from_db``: a store of real memories (LoCoMo text, embedded by the local model) and
  ``sessions`` labelled sessions of 50 candidates each, trained for ``epochs`` epochs with
  early stopping off, timed by the sidecar (loading and training) and at the client.

Issue targets: scoring 100 candidates p50 <= 5 ms in process, p95 <= 15 ms through the
sidecar; train_from_db on 500 sessions x 50 epochs <= 15 s on 2 cores.
"""

from __future__ import annotations

import base64
import json
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.corpus import memory_texts
from benchmarks.metrics import latency_summary
from memlane.config import Settings
from memlane.config.clock import to_iso
from memlane.container import open_container
from memlane.services.inputs import RememberInput
from memlane.services.predictor_signals import score_params
from memlane.services.predictor_types import PoolMember
from memlane.storage import predictor as pred_sql
from memlane.storage import sessions as sess_sql

Progress = Callable[[str, int, int], None]


def _signals(rng: random.Random, rank: int) -> dict[str, Any]:
    return {
        "age_days": rng.uniform(0, 90),
        "importance": rng.uniform(0.3, 0.9),
        "access_count": rng.randrange(10),
        "is_superseded": False,
        "pinned": False,
        "baseline_score": max(0.0, 0.9 - 0.01 * rank + rng.gauss(0, 0.02)),
        "baseline_rank": rank,
        "context_similarity": rng.uniform(-0.1, 0.8),
        "bm25_score": rng.uniform(0, 1),
        "vector_score": rng.uniform(0, 1),
    }


def _fill_sessions(c: Any, n_sessions: int, candidates: int, rng: random.Random, dim: int) -> None:
    ids = [m.id for m in c.memories.list(limit=1000, offset=0)[0]]
    ids += [m.id for m in c.memories.list(limit=1000, offset=1000)[0]]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def job(conn: Any) -> None:
        for s in range(n_sessions):
            key = f"bench-train-{s}"
            at = to_iso((t0 + timedelta(hours=s)).replace(tzinfo=None))
            sess_sql.insert_session(
                conn,
                key=key,
                project="bench",
                harness="bench",
                cwd=None,
                context=f"bench session {s}",
                started_at=at,
                predictor_state="collecting",
            )
            pool = rng.sample(ids, candidates)
            sess_sql.record_candidates(
                conn,
                key,
                [
                    sess_sql.CandidateRow(
                        memory_id=m,
                        source="effective",
                        final_score=1.0 / (r + 1),
                        rank=r + 1,
                        was_injected=r < 10,
                        baseline_rank=r + 1,
                    )
                    for r, m in enumerate(pool)
                ],
                at,
            )
            ctx = np.asarray([rng.gauss(0, 1) for _ in range(dim)], dtype=np.float32)
            pred_sql.set_session_inputs(
                conn,
                key,
                context_vector=ctx / np.linalg.norm(ctx),
                context_model=c.embedder.model_id,
                signals={"session_time": at, "session_gap_hours": 1.0},
            )
            pred_sql.set_candidate_features(conn, key, {m: _signals(rng, r) for r, m in enumerate(pool)})
            positives = set(rng.sample(range(candidates), rng.randint(1, 3)))
            conn.executemany(
                "UPDATE session_memories SET label = ? WHERE session_key = ? AND memory_id = ?",
                [(0.7 if r in positives else 0.0, key, m) for r, m in enumerate(pool)],
            )
            sess_sql.write_score(
                conn,
                key,
                score=0.7,
                confidence=0.9,
                memories_recalled=10,
                memories_used=1,
                novel_context_count=0,
                reasoning="bench",
                scorer="behavioral",
                model=None,
                at=at,
            )

    c.db.write(job)


def run_predictor_latency(
    data: Path,
    *,
    n_scores: int = 300,
    n_sessions: int = 500,
    epochs: int = 50,
    candidates: int = 100,
    workdir: Path | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Measure in-process scoring, sidecar scoring and train_from_db; returns the report."""
    from memlane.predictor.client import SidecarClient, sidecar_command
    from memlane.predictor.engine import PredictorEngine
    from memlane.predictor.model import configure_threads
    from memlane.predictor.rpc_params import parse_score_params

    tmp = tempfile.TemporaryDirectory(prefix="memlane-predlat-") if workdir is None else None
    root = Path(tmp.name) if tmp else workdir
    assert root is not None
    rng = random.Random(0)
    report: dict[str, Any] = {}
    try:
        home = root / "store"
        shutil.rmtree(home, ignore_errors=True)
        c = open_container(Settings(home=home, sqlite_synchronous="NORMAL"), warmup=True, predictor=False)
        try:
            texts = memory_texts(data, 2000)
            c.memories.remember_many([RememberInput(content=t, project="bench") for t in texts])
            if progress:
                progress("store filled", 1, 3)
            embedder = c.embedder
            if embedder is None:
                raise RuntimeError("the predictor latency bench needs the local embedding model")
            _fill_sessions(c, n_sessions, 50, rng, embedder.dimensions)
            model_id, dim = embedder.model_id, embedder.dimensions
            pool = rng.sample([m for m in c.memories.list(limit=1000)[0]], candidates)
            vecs, _ = c.memories.index.vectors_of([m.seq for m in pool])
            ctx = vecs[0] * 0.5 + vecs[1] * 0.5
        finally:
            c.close()
        signals = {m.id: _signals(rng, r) for r, m in enumerate(pool)}
        members = [
            PoolMember(
                memory_id=m.id,
                seq=m.seq,
                baseline_score=signals[m.id]["baseline_score"],
                baseline_rank=r + 1,
                similarity=signals[m.id]["context_similarity"],
            )
            for r, m in enumerate(pool)
        ]
        # The daemon's request: ids and signals; the sidecar reads the vectors from the store.
        sidecar_params = score_params(members, signals, ctx, "", "bench", datetime.now().astimezone(), 3.0)
        # In process: the model's inputs handed over (vectors included, no JSON, no pipe, no read).
        params = {
            **sidecar_params,
            "candidate_embeddings_b64": base64.b64encode(np.ascontiguousarray(vecs, "<f4").tobytes()).decode(),
            "candidate_is_embedded": [True] * candidates,
        }
        # In process: parse + features + score, single-threaded like the sidecar.
        configure_threads(1)
        engine = PredictorEngine(root / "inproc-model", embedding_model_id=model_id, native_dim=dim)
        wire = json.loads(json.dumps(params))
        times = []
        for i in range(n_scores + 20):
            t = time.perf_counter()
            _, session = parse_score_params(wire, native_dim=dim, lookup=lambda ids: {})
            engine.score(session)
            if i >= 20:
                times.append((time.perf_counter() - t) * 1000)
        report["score_in_process_ms"] = latency_summary(times)
        # Through the sidecar.
        client = SidecarClient(
            sidecar_command(
                db_path=home / "memories.db",
                model_dir=root / "sidecar-model",
                embedding_model_id=model_id,
                native_dim=dim,
            ),
            stderr_path=root / "sidecar.log",
        )
        try:
            if not client.wait_ready(120):
                raise RuntimeError(f"the sidecar did not start; see {root / 'sidecar.log'}")
            times, server = [], []
            for i in range(n_scores + 20):
                t = time.perf_counter()
                reply = client.call("score", sidecar_params, timeout_s=5.0)
                if i >= 20:
                    times.append((time.perf_counter() - t) * 1000)
                    server.append(reply["took_ms"])
            report["score_sidecar_ms"] = latency_summary(times)
            report["score_sidecar_server_ms"] = latency_summary(server)
            if progress:
                progress("scoring measured", 2, 3)
            t = time.perf_counter()
            res = client.call(
                "train_from_db",
                {"epochs": epochs, "max_seconds": 3600, "early_stop_patience": epochs + 1, "influential": False},
                timeout_s=3600,
            )
            report["train_from_db"] = {
                "sessions": res.get("sample_count"),
                "canary_sessions": res.get("canary_sessions"),
                "epochs": epochs,
                "steps": res.get("steps"),
                "stop_reason": res.get("stop_reason"),
                "load_ms": res.get("load_ms"),
                "train_ms": res.get("duration_ms"),
                "client_s": time.perf_counter() - t,
                "accepted": res.get("accepted"),
            }
        finally:
            client.close()
        report["config"] = {
            "candidates": candidates,
            "scores": n_scores,
            "sessions": n_sessions,
            "epochs": epochs,
            "embedding_model": model_id,
            "native_dim": dim,
        }
        return report
    finally:
        if tmp:
            tmp.cleanup()
