"""What a test needs from the machine — a browser, a shipped checkpoint, an installed package —
and what happens when it is not there.

On a developer's machine a missing prerequisite skips the test with its reason. In CI (the
environment variable ``CI`` is ``true``; ``.ci/run`` sets it) it fails the test instead: CI must
never pass by skipping. Skips that are right by design (a check of the message given without
CUDA, on a machine that has CUDA) are plain ``pytest.mark.skipif`` and stay skips everywhere.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

MARK = "requires"
"""The name of the mark :func:`requires` makes; ``conftest.py`` checks it before setup."""


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def missing(reason: str) -> NoReturn:
    """The prerequisite ``reason`` names is missing: skip (fail in CI). Works inside a test, a
    fixture and at module level (a whole module that needs it)."""
    if in_ci():
        pytest.fail(f"CI=true, and a prerequisite is missing: {reason}", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


def requires(met: bool, reason: str) -> pytest.MarkDecorator:
    """Mark a test (or, as ``pytestmark``, a module) that needs ``met`` to hold: when it does
    not, the test is skipped with ``reason`` — or fails, in CI."""
    return pytest.mark.requires(met=met, reason=reason)


def unmet(item: pytest.Item) -> list[str]:
    """The reasons of ``item``'s ``requires`` marks that are not met."""
    return [mark.kwargs["reason"] for mark in item.iter_markers(MARK) if not mark.kwargs["met"]]


def apply_marks(item: pytest.Item) -> None:
    """At collection: an unmet ``requires`` mark becomes a skip, reported at the test (in CI,
    :func:`fail_unmet` fails the test instead)."""
    if not in_ci():
        for reason in unmet(item):
            item.add_marker(pytest.mark.skip(reason=reason))


def fail_unmet(item: pytest.Item) -> None:
    """Before setup, in CI: fail ``item`` if a ``requires`` mark of it is unmet."""
    if in_ci():
        for reason in unmet(item):
            missing(reason)
