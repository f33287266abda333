"""A scripted LLM for filling a dashboard store (the browser tests and ``memlane bench dashboard``).

Served by :class:`benchmarks.scripted_llm.ScriptedLlmServer` (real HTTP, Ollama protocol), it
answers memlane's real prompts the way a model would, deterministically and at once:

* extraction: for one input in :data:`EXTRACT_EVERY` (by a stable hash of its text), one fact
  restating it and one entity triple (its first capitalised word -> "mentions" -> its second),
  so the knowledge graph and the session-end review get rows; nothing for the others (an
  extraction of every LoCoMo turn would dominate the fill's time);
* decision: ADD;
* contradiction: no contradiction;
* continuity judge: a verdict with ``score`` and ``confidence`` from the transcript's length
  (0.55-0.85), a one-sentence reasoning and no per-memory ratings.
"""

from __future__ import annotations

import hashlib
import json
import re

from benchmarks.scripted_llm import prompt_input
from memlane.pipeline.prompts import CONTRADICTION_MARKER, DECISION_MARKER, EXTRACTION_MARKER

#: One extraction input in this many yields a fact.
EXTRACT_EVERY = 6
JUDGE_MARKER = "You are evaluating how well pre-loaded memories served"
_CAPITAL = re.compile(r"\b[A-Z][a-z]{2,}\b")


def _bucket(text: str) -> int:
    return int(hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8], 16) % EXTRACT_EVERY


def fill_reply(prompt: str) -> str:
    """The scripted model's answer to one of memlane's prompts (see the module docstring)."""
    if EXTRACTION_MARKER in prompt:
        text = prompt_input(prompt)
        if not text or _bucket(text) != 0:
            return json.dumps({"facts": [], "entities": []})
        names = _CAPITAL.findall(text)
        entities = (
            [{"source": names[0], "relationship": "mentions", "target": names[1], "confidence": 0.8}]
            if len(names) >= 2 and names[0] != names[1]
            else []
        )
        fact = " ".join(text.split()[:24])
        return json.dumps(
            {"facts": [{"content": f"Inferred: {fact}", "type": "fact", "confidence": 0.85}], "entities": entities}
        )
    if DECISION_MARKER in prompt:
        return '{"action": "ADD", "confidence": 0.9, "reason": "new information"}'
    if CONTRADICTION_MARKER in prompt:
        return '{"contradicts": false, "confidence": 0.5, "reasoning": "compatible"}'
    if JUDGE_MARKER in prompt:
        n = len(prompt)
        score = 0.55 + (n % 31) / 100.0
        return json.dumps(
            {
                "score": round(score, 2),
                "confidence": round(0.6 + (n % 26) / 100.0, 2),
                "memories_used": 1,
                "novel_context_count": 0,
                "reasoning": "The injected memories covered the people and plans the session discussed.",
                "per_memory": [],
            }
        )
    return "{}"


def main() -> None:  # pragma: no cover - run as a subprocess by the tests and the benchmark
    """``python -m benchmarks.dashboard_llm``: serve :func:`fill_reply` until stdin closes,
    printing the base URL as the first stdout line."""
    import sys

    from benchmarks.scripted_llm import ScriptedLlmServer

    with ScriptedLlmServer(fill_reply) as server:
        print(server.url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":  # pragma: no cover
    main()
