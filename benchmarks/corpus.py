"""Realistic memory text for load benchmarks, drawn from LoCoMo (read from ../shared, never copied).

Sources, in order: raw turns, observations (LLM-written facts), event and session summaries;
every string deduplicated by content hash. When a benchmark asks for more texts than that,
the rest are pairs of turns (consecutive, then 2 apart, 3 apart, ...) joined into one memory.
"""

from __future__ import annotations

import json
from pathlib import Path

from memlane.normalize import content_hash
from memlane.ranker.locomo import load_locomo


def memory_texts(path: Path, n: int) -> list[str]:
    """``n`` distinct realistic memory texts (fewer only if the file cannot supply them).

    Raises:
        ValueError: the file is not LoCoMo-shaped.
    """
    convs = load_locomo(path)
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    texts: list[str] = [t.text for c in convs for t in c.turns]
    for sample in raw:
        for obs in (sample.get("observation") or {}).values():
            for facts in (obs or {}).values():
                texts.extend(f[0] for f in facts if isinstance(f, list) and f and isinstance(f[0], str))
        for ev in (sample.get("event_summary") or {}).values():
            for key, items in (ev or {}).items():
                if key != "date" and isinstance(items, list):
                    texts.extend(i for i in items if isinstance(i, str))
        texts.extend(s for s in (sample.get("session_summary") or {}).values() if isinstance(s, str))
    turns = [t.text for c in convs for t in c.turns]
    # Beyond the real strings: pairs of turns at growing distance (still real text), as many
    # as asked for (a 100,000-memory store needs ~17 distances).
    distance = 1
    while len(texts) < n * 1.2 and distance < len(turns):
        texts.extend(f"{a} {b}" for a, b in zip(turns, turns[distance:]))
        distance += 1
    seen: set[str] = set()
    out: list[str] = []
    for t in texts:
        h = content_hash(t)
        if t.strip() and h not in seen:
            seen.add(h)
            out.append(t)
            if len(out) == n:
                break
    return out


def queries(path: Path) -> list[str]:
    """Every LoCoMo question (1,986), in file order."""
    return [q.question for c in load_locomo(path) for q in c.questions]
