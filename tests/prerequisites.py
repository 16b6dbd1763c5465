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
"""The name of the mark :func:`requires` makes; the hooks below (which ``conftest.py`` takes)
skip or fail its tests."""


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARK}(met, reason): the test needs a prerequisite; unmet, it is skipped with the "
        "reason, or fails when CI=true (tests/prerequisites.py)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """At collection, off CI: an unmet ``requires`` mark becomes a skip, reported at the test."""
    if not in_ci():
        for item in items:
            for reason in unmet(item):
                item.add_marker(pytest.mark.skip(reason=reason))


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures, in CI: fail ``item`` if a ``requires`` mark of it is unmet.

    Why not ``tryfirst``: pytest's own skipping hook is, and must go first — a test skipped by
    design (``skip``, ``skipif``: the container test outside ``make test-container``) is not
    run, so what it would need cannot be missing. A conftest's plain hook still runs before
    pytest's runner sets up the fixtures (conftests register after the built-in plugins, and
    pluggy calls the last registered first)."""
    if in_ci():
        for reason in unmet(item):
            missing(reason)
