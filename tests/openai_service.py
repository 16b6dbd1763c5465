"""What the tests of the `openai` backend share: the key, the time limits and the settings of
a backend talking to the fake service (``tooling/emulators/openai.py``). Its fixtures, ``fake``
and ``api_key``, are in ``conftest.py``."""

from __future__ import annotations

from cadence.llm.options import OpenAIOptions

KEY_ENV = "CADENCE_TEST_OPENAI_KEY"
KEY = "sk-cadence-test-7f3a9c21e8b64d05"
FAULT_LIMIT_MS = 300
"""The time limit a test's broken service (or tool) runs into: a hundred times what the
stand-in on loopback takes to answer, so only the fault reaches it."""
LIMIT_MS = 30_000
"""Every other time limit: far beyond anything on loopback, however busy the machine."""


def settings(base_url: str, **changes: object) -> OpenAIOptions:
    """Time limits that only a fault reaches: ``LIMIT_MS``, but for the ones a test makes short
    (``FAULT_LIMIT_MS``) because its fault is to run into them."""
    values: dict[str, object] = {
        "base_url": base_url,
        "model": "mercury-2",
        "api_key_env": KEY_ENV,
        "connect_timeout_ms": LIMIT_MS,
        "first_piece_timeout_ms": LIMIT_MS,
        "stall_timeout_ms": LIMIT_MS,
        "reply_timeout_ms": LIMIT_MS,
    }
    return OpenAIOptions.model_validate(values | changes)
