"""Replays of real data through the whole session lifecycle (``memlane replay ...``).

Modules:
    locomo  LoCoMo conversations as agent sessions, questions as short sessions with feedback.
"""
