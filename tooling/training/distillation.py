"""Sequence-level distillation: the AR teacher's own greedy replies as training targets.

A diffusion model commits several tokens in one step only where it is confident about each
of them independently. Human replies are many-valued (the same request gets many phrasings);
the teacher's greedy replies are one consistent choice per context, which sharpens the
student's per-position predictions. The result is an ordinary dialogue corpus (JSONL) whose
agent turns are the teacher's, so ``cadence train --corpus`` takes it like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from cadence.llm.attention_masks import visibility
from cadence.llm.checkpoint import LoadedModel
from cadence.llm.decoding import never_in_reply
from cadence.llm.dialogue import Turn
from cadence.tooling.training.corpus import Dialogue


@torch.inference_mode()
def teacher_replies(
    teacher: LoadedModel,
    prompts: Sequence[list[int]],
    max_tokens: int,
    batch_size: int = 64,
) -> list[list[int]]:
    """Greedy replies of the causal ``teacher`` to ``prompts``, decoded in batches of similar
    length: prompts are left-padded (padding is masked out, and rotary positions only matter
    relative to each other), then every row takes one token per step until all have ended."""
    model = teacher.model
    special = teacher.tokenizer.special
    never = never_in_reply(special)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    replies: dict[int, list[int]] = {}
    for first in range(0, len(order), batch_size):
        members = order[first : first + batch_size]
        batch = [prompts[i] for i in members]
        width = max(map(len, batch))
        ids = torch.tensor([[special.pad] * (width - len(p)) + p for p in batch])
        valid = torch.tensor([[False] * (width - len(p)) + [True] * len(p) for p in batch])
        cache = model.new_cache()
        positions = torch.arange(width)
        allowed = visibility(positions, positions, "causal", 1)[None] & valid[:, None, :]
        allowed |= torch.eye(width, dtype=torch.bool)  # padding attends to itself
        logits = model(ids, positions.expand_as(ids), allowed[:, None], cache)[:, -1]
        rows: list[list[int]] = [[] for _ in batch]
        done = torch.zeros(len(batch), dtype=torch.bool)
        for step in range(max_tokens):
            tokens = logits.index_fill(-1, never, float("-inf")).argmax(-1)
            done |= (tokens == special.end_of_turn) | (tokens == special.pad)
            for row, token in enumerate(tokens.tolist()):
                if not done[row]:
                    rows[row].append(token)
            if bool(done.all()):
                break
            valid = torch.cat((valid, torch.ones(len(batch), 1, dtype=torch.bool)), dim=1)
            position = torch.full((len(batch), 1), width + step)
            logits = model(tokens[:, None], position, valid[:, None, None, :], cache)[:, -1]
        replies.update(zip(members, rows, strict=True))
    return [replies[i] for i in range(len(prompts))]


def distil_dialogues(
    teacher: LoadedModel,
    dialogues: Sequence[Dialogue],
    history_turns: int,
    max_context_tokens: int,
    on_batch: Callable[[int], None] | None = None,
    batch_size: int = 64,
) -> list[Dialogue]:
    """``dialogues`` with every agent turn replaced by the teacher's reply to the real
    history before it. ``on_batch`` is told how many dialogues are done."""
    fmt = teacher.format
    result: list[Dialogue] = []
    chunk = max(1, batch_size // 2)
    for first in range(0, len(dialogues), chunk):
        group = dialogues[first : first + chunk]
        slots = [
            (d, i)
            for d, dialogue in enumerate(group)
            for i, t in enumerate(dialogue.turns)
            if t.speaker == "agent"
        ]
        prompts = [
            fmt.prompt(group[d].turns[:i], history_turns, max_context_tokens) for d, i in slots
        ]
        replies = teacher_replies(teacher, prompts, fmt.max_turn_tokens - 2, batch_size)
        turns = [list(dialogue.turns) for dialogue in group]
        for (d, i), reply in zip(slots, replies, strict=True):
            turns[d][i] = Turn("agent", teacher.tokenizer.decode(reply))
        result += [
            replace(dialogue, turns=tuple(t)) for dialogue, t in zip(group, turns, strict=True)
        ]
        if on_batch is not None:
            on_batch(len(result))
    return result
