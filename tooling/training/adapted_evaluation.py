"""``cadence eval-lm`` for SmolLM2 with a Cadence adapter (``llm/adapted.py``): the same
dialogues, tallies and report as the embedded models (:func:`measure_replies`), through the
runtime's own decoders and prompts, with the runtime's reply, context and history floors
(``adapted_options``).

The validation NLL is the training objective's on the evaluated dialogues, rendered as in
training (``lm_corpus.dialogue_windows``): next-token NLL per agent token for the AR adapter;
for the diffusion adapter the NLL of the masked agent tokens under one seeded draw of the
complementary masks (each agent token masked once), its ELBO term at that draw.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import torch

from cadence.core.clock import MonotonicClock
from cadence.llm.adapted import AdaptedModel, load_adapted
from cadence.llm.adapted_decoding import (
    AdaptedARDecoder,
    AdaptedDiffusionDecoder,
    adapted_options,
)
from cadence.llm.generator import GeneratorOptions
from cadence.tooling.training.corpus import Dialogue
from cadence.tooling.training.evaluation import BackendReport, measure_replies
from cadence.tooling.training.lm_corpus import dialogue_windows
from cadence.tooling.training.lm_objectives import block_diffusion_mask, noisy_copies

WINDOW = 256
"""Tokens of an NLL window (the adapters' training windows)."""


def evaluate_adapted(
    backend: str,
    checkpoint: str,
    options: GeneratorOptions,
    dialogues: Sequence[Dialogue],
    on_reply: Callable[[], None] | None = None,
    lexicon: frozenset[str] = frozenset(),
) -> BackendReport:
    """Generate every agent turn of ``dialogues`` with the adapter ``checkpoint`` and measure
    it as :func:`cadence.tooling.training.evaluation.evaluate_backend` does."""
    model = load_adapted(checkpoint, torch.device("cpu"))
    options = adapted_options(options)
    clock = MonotonicClock()
    kind = AdaptedDiffusionDecoder if model.objective == "bd" else AdaptedARDecoder
    return measure_replies(
        backend,
        checkpoint,
        lambda: kind(model, options.decoding, clock),
        model.format,
        options,
        dialogues,
        calls=True,
        diffusion=model.objective == "bd",
        nll=lambda: adapted_nll(model, dialogues),
        on_reply=on_reply,
        lexicon=lexicon,
    )


@torch.inference_mode()
def adapted_nll(model: AdaptedModel, dialogues: Sequence[Dialogue]) -> float:
    """Mean NLL per agent token of ``dialogues`` (see the module), in nats."""
    fmt, network = model.format, model.network
    rng = random.Random(0)
    total, count = 0.0, 0
    for dialogue in dialogues:
        for ids, written in dialogue_windows(fmt, fmt.encode_turns(dialogue.turns), WINDOW, rng):
            x, w = torch.tensor([ids]), torch.tensor([written])
            if model.objective == "ar":
                positions = torch.arange(len(ids))[None]
                allowed = positions[0][None, :] <= positions[0][:, None]
                logits = network(x, positions, allowed[None, None])[0, :-1]
                targets, rows = x[0, 1:], w[0, 1:]
            else:
                size = model.block_size
                padded = -len(ids) % size
                x = torch.cat((x, torch.zeros(1, padded, dtype=x.dtype)), dim=1)
                w = torch.cat((w, torch.zeros(1, padded, dtype=w.dtype)), dim=1)
                length = x.shape[1]
                sequence, masks = noisy_copies(x, w, size, torch.Generator().manual_seed(0))
                positions = torch.arange(length).repeat(3)[None]
                allowed = block_diffusion_mask(length, size, torch.device("cpu"))
                out = network(sequence, positions, allowed[None, None])[0]
                at = torch.arange(length)
                rows_list, target_list = [], []
                for copy, mask in enumerate(masks, start=1):
                    source = torch.where(at % size == 0, at - 1, copy * length + at - 1)
                    chosen = mask[0].nonzero().flatten()
                    rows_list.append(out[source[chosen]])
                    target_list.append(x[0, chosen])
                logits, targets = torch.cat(rows_list), torch.cat(target_list)
                rows = torch.ones(len(targets), dtype=torch.bool)
            nll = torch.nn.functional.cross_entropy(
                logits[rows].float(), targets[rows], reduction="sum"
            )
            total, count = total + float(nll), count + int(rows.sum())
    return total / max(count, 1)
