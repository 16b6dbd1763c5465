"""Confirms a family's known facts against a model directory's own files.

A directory can be a different model under the right name, a tokenizer from another release,
a fine-tune that moved the mask token, or a copy that lost a file. Each fact the decoder
relies on — the mask token and its id, Qwen's control tokens, the block size, the chat
format, the vocabulary — is compared with what the files say, and the first disagreement
fails the load with the file, the value found and the value expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from cadence.llm.open_weights.families import QWEN_CONTROL_IDS, STOP_TOKENS, Family
from cadence.llm.open_weights.files import CONFIG, TOKENIZER, TOKENIZER_CONFIG, OpenWeightsError

BLOCK_SIZE_KEY = "models.llm.block_size"


def family_tokens(family: Family) -> dict[str, int]:
    """The tokens the decoder uses and their ids: Qwen's control tokens and the mask."""
    return {**QWEN_CONTROL_IDS, family.mask_token: family.mask_id}


def confirm_tokenizer(tokenizer: Tokenizer, family: Family, root: Path) -> None:
    """``tokenizer.json`` holds the mask and control tokens at the family's ids."""
    for token, wanted in family_tokens(family).items():
        found = tokenizer.token_to_id(token)
        if found is None:
            raise OpenWeightsError(
                root / TOKENIZER, f"lacks {token} ({family.name} uses it as id {wanted})"
            )
        if found != wanted:
            raise OpenWeightsError(
                root / TOKENIZER, f"{token} has id {found}; {family.name} uses {wanted}"
            )


def confirm_tokenizer_config(settings: dict[str, Any], family: Family, root: Path) -> None:
    """``tokenizer_config.json`` has a ChatML chat template (the format Cadence renders) and,
    where it lists them, the mask token at its id."""
    path = root / TOKENIZER_CONFIG
    template = settings.get("chat_template")
    if isinstance(template, list):  # several named templates: the default one is used
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    if not isinstance(template, str) or not all(
        t in template for t in ("<|im_start|>", "<|im_end|>")
    ):
        raise OpenWeightsError(
            path, "chat_template is missing or not ChatML (<|im_start|>role … <|im_end|>)"
        )
    decoder = settings.get("added_tokens_decoder") or {}
    listed = decoder.get(str(family.mask_id), {}).get("content", family.mask_token)
    if listed != family.mask_token:
        raise OpenWeightsError(
            path, f"id {family.mask_id} is {listed!r}; {family.name}'s mask is {family.mask_token}"
        )
    mask = settings.get("mask_token", family.mask_token)
    mask = mask.get("content") if isinstance(mask, dict) else mask
    if mask != family.mask_token:
        raise OpenWeightsError(
            path, f"mask_token is {mask!r}; {family.name}'s mask is {family.mask_token}"
        )


def confirm_config(config: dict[str, Any], family: Family, root: Path) -> None:
    """``config.json`` has room for the mask id, agrees on it where it names it, and ends
    text with one of the stop tokens."""
    path = root / CONFIG
    vocab = config.get("vocab_size")
    if not isinstance(vocab, int) or vocab <= family.mask_id:
        raise OpenWeightsError(
            path, f"vocab_size {vocab!r} leaves no room for the mask id {family.mask_id}"
        )
    mask = config.get("mask_token_id", family.mask_id)
    if mask != family.mask_id:
        raise OpenWeightsError(
            path, f"mask_token_id is {mask}; {family.name} uses {family.mask_id}"
        )
    eos = config.get("eos_token_id")
    stops = {QWEN_CONTROL_IDS[token] for token in STOP_TOKENS}
    for token in eos if isinstance(eos, list) else [] if eos is None else [eos]:
        if token not in stops:
            raise OpenWeightsError(
                path, f"eos_token_id {token} is not one of the stop tokens {sorted(stops)}"
            )


def block_size(config: dict[str, Any], family: Family, root: Path, configured: int) -> int:
    """The block size to decode with: ``models.llm.block_size``, which must be one the family
    is trained with and agree with ``config.json`` where the directory states it."""
    stated = config.get(family.block_size_key)
    if stated is None and family.block_size_stated:
        raise OpenWeightsError(
            root / CONFIG, f"lacks {family.block_size_key} ({family.name}'s block size)"
        )
    if stated is not None and stated != configured:
        raise OpenWeightsError(
            root / CONFIG,
            f"{family.block_size_key} is {stated}, so set {BLOCK_SIZE_KEY}: {stated} "
            f"(it is {configured})",
            key=BLOCK_SIZE_KEY,
        )
    if configured not in family.block_sizes:
        raise OpenWeightsError(
            root / CONFIG,
            f"{family.name} checkpoints use blocks of {', '.join(map(str, family.block_sizes))}, "
            f"not {configured}",
            key=BLOCK_SIZE_KEY,
        )
    return configured
