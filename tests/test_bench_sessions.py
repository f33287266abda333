"""``memlane bench sessions`` helpers (the benchmark itself drives a real daemon; not run here)."""

from __future__ import annotations

import pytest

from benchmarks.sessions import seed_alpha
from memlane.predictor import policy
from memlane.storage import predictor as pred_sql


def test_seed_alpha_stores_an_earned_state_the_daemon_reads(open_store, tmp_path) -> None:
    home = tmp_path / "home"
    open_store(home=home).close()  # a migrated store
    seed_alpha(home, 0.8)
    c = open_store(home=home)
    state = policy.PolicyState.from_dict(c.db.read(pred_sql.load_state))
    assert policy.alpha_for(state) == pytest.approx(0.8)
    assert policy.phase_of(state) == "active" and state.margin_ema >= 0
    # ...and a model for the sidecar, which the daemon starts only when there is one (issue 43).
    assert (home / "predictor" / "model.bin").is_file()
    with pytest.raises(ValueError):
        seed_alpha(home, 1.0)
