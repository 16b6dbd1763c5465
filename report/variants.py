"""Which turns belong together: a bench with ``--ablate`` runs the same clips under several
variants in one process, and each turn says which in its ``variant`` annotation."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from cadence.pipeline.tracing import TurnTrace

PRIMARY: Final = "full"
"""The variant every ablation is compared with, when the traces have it."""

UNLABELLED: Final = "unlabelled"
"""The group of turns without a ``variant`` annotation (a server's log, a plain bench)."""


def variant_of(turn: TurnTrace) -> str:
    variant = turn.annotations.get("variant")
    return variant if isinstance(variant, str) and variant else UNLABELLED


def group_by_variant(traces: Iterable[TurnTrace]) -> dict[str, list[TurnTrace]]:
    """Turns by variant, variants in the order they first appear, turns in trace order."""
    groups: dict[str, list[TurnTrace]] = {}
    for turn in traces:
        groups.setdefault(variant_of(turn), []).append(turn)
    return groups


def primary_variant(names: Sequence[str]) -> str:
    """``full`` if present, else the first variant."""
    return PRIMARY if PRIMARY in names else names[0]
