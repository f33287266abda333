"""Checkpoints as an older memlane wrote them, for the load-compatibility tests
(``test_predictor_anchor``, ``test_predictor_bilinear``)."""

from __future__ import annotations

from memlane.predictor.model import MemoryScorer


def writer_without(*keys: str) -> type[MemoryScorer]:
    """A :class:`MemoryScorer` whose ``state_dict`` lacks ``keys``: saved with
    ``checkpoint.save``, it is the file the code before those tensors existed wrote."""

    class _OlderWriter(MemoryScorer):
        def state_dict(self, *args, **kwargs):
            state = super().state_dict(*args, **kwargs)
            for key in keys:
                state.pop(key)
            return state

    return _OlderWriter
