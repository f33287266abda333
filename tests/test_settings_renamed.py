"""Issue 38, "Dead or hidden settings": ``sessions.min_training_sessions`` and
``predictor.min_training_sessions`` were two settings with one name. The session one (the N of
the collecting status line when no predictor runs) is now ``sessions.collecting_target_sessions``;
the old key still works, from config.yaml too, with a warning naming the new key."""

from __future__ import annotations

import logging

from memlane.config import load_settings
from memlane.services.inputs import RememberInput
from memlane.sessions.inputs import StartInput

NOW = "2026-03-01T12:00:00Z"


def test_the_new_key_sets_the_status_line(open_store):
    c = open_store(sessions={"collecting_target_sessions": 4})
    c.memories.remember(RememberInput("the deploy script lives in ops/deploy.sh", importance=0.9))
    res = c.sessions.start(StartInput("s-new", now=NOW))
    assert res.inject.startswith("[memlane: collecting | 0/4 sessions | baseline only]\n")
    assert c.settings.predictor.min_training_sessions == 10  # the predictor's own threshold, untouched


def test_the_old_key_in_config_yaml_still_works_with_a_warning(tmp_path, caplog, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    (home / "config.yaml").write_text("sessions:\n  min_training_sessions: 3\n")
    (home / "config.yaml").chmod(0o600)
    monkeypatch.setenv("MEMLANE_CONFIG", str(home / "config.yaml"))
    with caplog.at_level(logging.WARNING, logger="memlane.config"):
        s = load_settings(home=home)
    assert s.sessions.collecting_target_sessions == 3
    assert not hasattr(s.sessions, "min_training_sessions")
    assert any("sessions.collecting_target_sessions" in r.getMessage() for r in caplog.records)


def test_the_new_key_wins_over_the_old_one(caplog):
    with caplog.at_level(logging.WARNING, logger="memlane.config"):
        s = load_settings(sessions={"min_training_sessions": 3, "collecting_target_sessions": 7})
    assert s.sessions.collecting_target_sessions == 7
    assert any("deprecated" in r.getMessage() for r in caplog.records)
