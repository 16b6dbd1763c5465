"""Batched teacher decoding for distillation gives the teacher's ordinary greedy replies."""

from __future__ import annotations

import llm_tiny

from cadence.core.clock import VirtualClock
from cadence.llm.autoregressive import AutoregressiveDecoder
from cadence.llm.checkpoint import LoadedModel
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.dialogue import Turn
from cadence.tooling.training.distillation import distil_dialogues, teacher_replies


def _teacher() -> LoadedModel:
    return LoadedModel(llm_tiny.model("causal", seed=3), llm_tiny.dialogue_format(), {})


def test_batched_teacher_replies_equal_one_by_one_greedy_decoding() -> None:
    teacher = _teacher()
    fmt = teacher.format
    histories = [[], *[list(d.turns[:3]) for d in llm_tiny.DIALOGUES], [Turn("user", "Hi")]]
    prompts = [fmt.prompt(h, 3, 64) for h in histories]
    batched = teacher_replies(teacher, prompts, max_tokens=6, batch_size=3)
    for prompt, reply in zip(prompts, batched, strict=True):
        decoder = AutoregressiveDecoder(
            teacher.model, fmt, DecodingOptions(max_reply_tokens=6), VirtualClock()
        )
        stats = ReplyStats()
        list(decoder.decode(prompt, stats))
        assert reply == stats.token_ids


def test_distilled_dialogues_keep_user_turns_and_replace_agent_turns() -> None:
    teacher = _teacher()
    distilled = distil_dialogues(teacher, list(llm_tiny.DIALOGUES), 3, 64)
    for original, new in zip(llm_tiny.DIALOGUES, distilled, strict=True):
        assert [t.speaker for t in new.turns] == [t.speaker for t in original.turns]
        for old_turn, new_turn in zip(original.turns, new.turns, strict=True):
            if old_turn.speaker == "user":
                assert new_turn == old_turn
