"""``cadence build-lm-corpus``: the dialogue corpora as SmolLM2 token windows, once, on the CPU.

The adapters of SmolLM2-135M-Instruct (``tooling/training/lm_adapter.py``) train on the GPU
device, which carries at most 64 MiB a call and has neither the corpora nor Cadence's SmolLM2
tokenizer there. So the conversations are rendered and tokenized here — with the runtime's own
rendering (``llm/chatml_tools.py``: ChatML, the calls and results of ``llm/tool_text.py``,
result slots) and its own tokenizer (``llm/pretrained/tokenizer.py``: SmolLM2 splits digits,
which transformers' GGUF tokenizer does not) — into one compressed ``.npz``:

* ``ids`` (uint16, windows × ``seq_len``) and ``written`` (bit-packed): each window is the
  system message and consecutive turns of one dialogue (as many as fit, from a random first
  turn, as the runtime's prompt holds the latest turns), padded with ``<|endoftext|>``; the
  loss is taken only where ``written`` is set, the agent's own words, calls and
  ``<|im_end|>``;
* ``val_ids``/``val_written``: windows of a validation corpus (never trained on);
* ``eval_prompts``/``eval_offsets``/``eval_expected``/``eval_expected_offsets``: call turns of
  that corpus as the runtime prompts them, each with the ids of the call the corpus's agent
  made, for a greedy exact-match check on the device;
* ``tokenizer``: the tokenizer's JSON (to decode samples there), ``meta``: what was read.

Everything is seeded: the same command writes the same file.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from cadence.llm.chatml_tools import EncodedTurn, ToolChatFormat
from cadence.llm.pretrained.tokenizer import build_tokenizer
from cadence.tooling.training.corpus import read_dialogues

PAD_ID = 0
"""``<|endoftext|>``: what a window is padded with (never in the loss)."""
EVAL_PROMPT_TOKENS = 384
"""The most a device evaluation prompt holds (system message and latest turns)."""


def smollm2_tokenizer(gguf: Path) -> Tokenizer:
    """The runtime's SmolLM2 tokenizer from the GGUF file's vocabulary (no weights read)."""
    from gguf import GGUFReader

    reader = GGUFReader(gguf)
    fields = {
        name: reader.fields[name].contents()
        for name in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges")
    }
    return build_tokenizer(
        fields["tokenizer.ggml.tokens"],
        fields["tokenizer.ggml.token_type"],
        fields["tokenizer.ggml.merges"],
    )


def chat_format(tokenizer: Tokenizer) -> ToolChatFormat:
    return ToolChatFormat(lambda text: tokenizer.encode(text, add_special_tokens=False).ids)


@dataclass(frozen=True)
class CorpusSlice:
    path: Path
    limit: int | None = None
    """Read only the first this many dialogues."""


def dialogue_windows(
    fmt: ToolChatFormat, turns: Sequence[EncodedTurn], seq_len: int, rng: random.Random
) -> list[tuple[list[int], list[bool]]]:
    """One dialogue's windows: the system message then consecutive turns, as many as fit in
    ``seq_len`` (a turn too long alone is cut), from a first turn of offset 0 or 1; windows
    where the agent writes nothing are left out."""
    room = seq_len - len(fmt.system)
    windows: list[tuple[list[int], list[bool]]] = []
    start = rng.randrange(min(2, len(turns))) if turns else 0
    while start < len(turns):
        ids, written = list(fmt.system), [False] * len(fmt.system)
        end = start
        while end < len(turns) and len(ids) + len(turns[end].ids) <= seq_len:
            ids += turns[end].ids
            written += turns[end].written
            end += 1
        if end == start:  # one turn longer than the room: its beginning
            ids += turns[start].ids[:room]
            written += turns[start].written[:room]
            end += 1
        if any(written):
            windows.append((ids, written))
        start = end
    return windows


def build_lm_corpus(
    gguf: Path,
    corpora: Sequence[CorpusSlice],
    validation: CorpusSlice,
    out: Path,
    seq_len: int = 256,
    validation_windows: int = 256,
    eval_calls: int = 100,
    seed: int = 0,
) -> dict[str, int]:
    """Write the ``.npz`` (see the module); returns how many windows, tokens and agent tokens
    went in, per corpus and in all."""
    tokenizer = smollm2_tokenizer(gguf)
    fmt = chat_format(tokenizer)
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    rows: list[tuple[list[int], list[bool]]] = []
    for corpus in corpora:
        found = 0
        for dialogue in read_dialogues(corpus.path, corpus.limit):
            windows = dialogue_windows(fmt, fmt.encode_turns(dialogue.turns), seq_len, rng)
            rows += windows
            found += len(windows)
        counts[f"windows_{corpus.path.stem}"] = found
    rng.shuffle(rows)
    val_rows: list[tuple[list[int], list[bool]]] = []
    prompts: list[list[int]] = []
    expected: list[list[int]] = []
    for dialogue in read_dialogues(validation.path, validation.limit):
        encoded = fmt.encode_turns(dialogue.turns)
        if len(val_rows) < validation_windows:
            val_rows += dialogue_windows(fmt, encoded, seq_len, rng)
        for index, turn in enumerate(dialogue.turns):
            if turn.tool_calls and len(prompts) < eval_calls:
                prompts.append(fmt.prompt_ids(encoded[:index], EVAL_PROMPT_TOKENS))
                call = encoded[index]
                expected.append([i for i, w in zip(call.ids, call.written, strict=True) if w])
    ids, written = _matrix(rows, seq_len)
    val_ids, val_written = _matrix(val_rows[:validation_windows], seq_len)
    counts |= {
        "windows": len(rows),
        "tokens": int((ids != PAD_ID).sum()),
        "agent_tokens": int(written.sum()),
        "validation_windows": len(val_ids),
        "eval_calls": len(prompts),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out,
        ids=ids,
        written=np.packbits(written, axis=1),
        val_ids=val_ids,
        val_written=np.packbits(val_written, axis=1),
        eval_prompts=np.array([i for p in prompts for i in p], dtype=np.uint16),
        eval_offsets=np.cumsum([0, *map(len, prompts)]).astype(np.int64),
        eval_expected=np.array([i for e in expected for i in e], dtype=np.uint16),
        eval_expected_offsets=np.cumsum([0, *map(len, expected)]).astype(np.int64),
        tokenizer=np.frombuffer(tokenizer.to_str().encode(), dtype=np.uint8),
        meta=np.frombuffer(json.dumps({"seq_len": seq_len, **counts}).encode(), dtype=np.uint8),
    )
    return counts


def _matrix(
    rows: Sequence[tuple[list[int], list[bool]]], seq_len: int
) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.bool_]]:
    ids = np.full((len(rows), seq_len), PAD_ID, dtype=np.uint16)
    written = np.zeros((len(rows), seq_len), dtype=np.bool_)
    for row, (window_ids, window_written) in enumerate(rows):
        ids[row, : len(window_ids)] = window_ids
        written[row, : len(window_written)] = window_written
    return ids, written
