"""A first look at the AR adapter where it was trained: greedy tool-call exact match on the call
turns of the validation corpus that ``cadence build-lm-corpus`` stored (the prompts as the
runtime builds them, the corpus agent's call as ids).

It is no substitute for ``cadence eval-lm`` (which runs the runtime's decoders, grounding and
all, on the test corpus): it needs nothing but the model and the data file, so that the device
call that trains the adapters also says whether they call tools at all. A reply matches when
its ids up to ``<|im_end|>`` are the corpus's, result slots as written.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import torch
from torch import nn

from cadence.tooling.training.lm_adapter import CALL_ID, IM_END_ID

MAX_NEW_TOKENS = 48
SAMPLES = 8


@torch.no_grad()
def evaluate_calls(
    model: nn.Module, data: Any, count: int, device: torch.device, batch: int = 50
) -> dict[str, Any]:
    """Exact match, the share of replies that call at all, and a few decoded samples."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_str(bytes(data["tokenizer"]).decode())
    prompts = _split(data["eval_prompts"], data["eval_offsets"])[:count]
    expected = _split(data["eval_expected"], data["eval_expected_offsets"])[:count]
    model.eval()
    replies: list[list[int]] = []
    for start in range(0, len(prompts), batch):
        replies += _greedy(model, prompts[start : start + batch], device)
    exact = [r == e for r, e in zip(replies, expected, strict=True)]
    called = [bool(r) and r[0] == CALL_ID for r in replies]
    samples = [
        {
            "expected": tokenizer.decode(e, skip_special_tokens=False),
            "generated": tokenizer.decode(r, skip_special_tokens=False),
        }
        for r, e in list(zip(replies, expected, strict=True))[:SAMPLES]
    ]
    result = {
        "call_turns": len(replies),
        "exact_match": sum(exact) / max(len(exact), 1),
        "called": sum(called) / max(len(called), 1),
        "samples": samples,
    }
    print(f"eval: exact match {result['exact_match']:.3f}, called {result['called']:.3f}")
    for sample in samples:
        print(f"  want {sample['expected']!r}\n  got  {sample['generated']!r}")
    return result


def _split(flat: Any, offsets: Any) -> list[list[int]]:
    values = np.asarray(flat).astype(np.int64)
    return [values[a:b].tolist() for a, b in pairwise(offsets)]


def _greedy(model: nn.Module, prompts: list[list[int]], device: torch.device) -> list[list[int]]:
    """Each prompt's greedy reply up to and with ``<|im_end|>`` (left-padded batch)."""
    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        mask[row, width - len(prompt) :] = 1
    generate: Any = model.generate
    out = generate(
        input_ids=ids.to(device),
        attention_mask=mask.to(device),
        max_new_tokens=MAX_NEW_TOKENS,
        do_sample=False,
        eos_token_id=IM_END_ID,
        pad_token_id=0,
    )[:, width:].tolist()
    replies = []
    for reply in out:
        end = reply.index(IM_END_ID) + 1 if IM_END_ID in reply else len(reply)
        replies.append(reply[:end])
    return replies
