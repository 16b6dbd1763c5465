"""The open-weight block-diffusion families Cadence runs, and the facts each is known by.

The facts come from the model cards and the reference decoding code of each family, never
from code inside a model directory; :mod:`cadence.llm.open_weights.checks` confirms them against the
directory's own files when it is loaded.

* **Fast-dLLM v2** (NVlabs; Qwen2.5 Instruct adapted to block diffusion): architecture
  ``Fast_dLLM_QwenForCausalLM``, model type ``Fast_dLLM_Qwen``; Qwen2 layers (grouped-query
  attention with a bias on the query, key and value projections); mask token ``|<MASK>|`` =
  151665; blocks of ``bd_size`` = 32 tokens decoded in sub-blocks of 8 (the reference
  ``generate(block_size=32, small_block_size=8)``); **shifted** predictions, as in its AR
  parent: the output at position *i* predicts token *i + 1*, so a block's first token comes
  from the last position before the block.
* **SDAR** (JetAstra; Qwen3 base models adapted to block diffusion): architecture
  ``SDARForCausalLM``, model type ``sdar``; Qwen3 layers (RMSNorm on each query and key head,
  no projection bias); mask token ``<|MASK|>`` = 151669; **unshifted** predictions (the output
  at a masked position predicts that position); block size 4 for the released chat models
  (``-b8`` … ``-b64`` variants exist), in ``config.json`` as ``block_size`` only in some
  directories.

Both speak ChatML (``<|im_start|>role\\n…<|im_end|>\\n``) with Qwen's control tokens at fixed
ids, and both prefill a prompt as whole blocks with block-causal attention (bidirectional
inside a block, causal across blocks, blocks counted from position 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cadence.llm.open_weights.files import CONFIG, OpenWeightsError

END_OF_TEXT = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
QWEN_CONTROL_IDS = {END_OF_TEXT: 151643, IM_START: 151644, IM_END: 151645}
"""Qwen's control tokens, the same in the Qwen2.5 and Qwen3 tokenizers."""
STOP_TOKENS = (IM_END, END_OF_TEXT)
"""A reply ends at the first of these (the end of the assistant turn, or of the text)."""


@dataclass(frozen=True)
class Family:
    name: str
    architecture: str
    """The entry of ``config.json``'s ``architectures``."""
    model_type: str
    base: str
    """The Qwen generation whose layers it uses."""
    mask_token: str
    mask_id: int
    shifted: bool
    """Whether the output at position *i* predicts token *i + 1* (else token *i*)."""
    qkv_bias: bool
    qk_norm: bool
    block_size_key: str
    """The ``config.json`` key of the block size."""
    block_size_stated: bool
    """Whether every checkpoint's ``config.json`` states it (else some do)."""
    block_sizes: tuple[int, ...]
    """Block sizes the family's checkpoints are trained with."""
    sub_block: int | None
    """Commits go left to right through sub-blocks of this size (``None``: the whole block)."""


FAST_DLLM_V2 = Family(
    name="Fast-dLLM v2",
    architecture="Fast_dLLM_QwenForCausalLM",
    model_type="Fast_dLLM_Qwen",
    base="Qwen2.5",
    mask_token="|<MASK>|",
    mask_id=151665,
    shifted=True,
    qkv_bias=True,
    qk_norm=False,
    block_size_key="bd_size",
    block_size_stated=True,
    block_sizes=(32,),
    sub_block=8,
)
SDAR = Family(
    name="SDAR",
    architecture="SDARForCausalLM",
    model_type="sdar",
    base="Qwen3",
    mask_token="<|MASK|>",
    mask_id=151669,
    shifted=False,
    qkv_bias=False,
    qk_norm=True,
    block_size_key="block_size",
    block_size_stated=False,
    block_sizes=(4, 8, 16, 32, 64),
    sub_block=None,
)
FAMILIES = (FAST_DLLM_V2, SDAR)


def detect_family(config: dict[str, Any], root: Path) -> Family:
    """The family ``config.json`` declares, by its ``architectures`` and ``model_type``."""
    architectures = config.get("architectures") or []
    known = ", ".join(f"{f.name}: {f.architecture}" for f in FAMILIES)
    for family in FAMILIES:
        if family.architecture in architectures:
            if config.get("model_type") != family.model_type:
                raise OpenWeightsError(
                    root / CONFIG,
                    f"architectures names {family.architecture} but model_type is "
                    f"{config.get('model_type')!r}, not {family.model_type!r}",
                )
            return family
    raise OpenWeightsError(
        root / CONFIG,
        f"architectures {architectures} is not an open-weight block-diffusion model Cadence "
        f"runs ({known})",
    )
