"""Cadence, a real-time voice agent: every package installs under this one name.

The packages live in the repository's top-level folders (``core/``, ``kernels/``, ``voice/``,
``llm/``, ``pipeline/``, ``web/``, ``tooling/``); each is linked here, so that the project
imports and installs as ``cadence.pipeline``, ``cadence.llm`` and so on, and a top-level
``llm`` or ``web`` of another distribution or of an embedding program never collides with
it (docs/architecture.md, "One namespace").
"""
