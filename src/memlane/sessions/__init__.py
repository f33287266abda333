"""The session lifecycle: how agents get memories and what the predictor learns from.

Modules:
    service      SessionService: session-start, prompt-submit, session-end, feedback, labels.
    start        the candidate pool, baseline ranking and topic diversity of a session-start.
    diversity    topic diversity (pure).
    labels       training-label rules (pure).
    continuity   the LLM continuity judge: prompt and reply parsing.
    inject       the text agents see (status line, memory block, feedback request).
    checkpoints  session checkpoints: buffered, merged, redacted; recovery digests.
    inputs       dataclasses in and out.
"""
