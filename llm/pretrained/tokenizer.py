"""SmolLM2's tokenizer, rebuilt from the vocabulary and merges stored in the GGUF file.

It is GPT-2's byte-level BPE with one difference that matters: SmolLM2 splits every digit into
a token of its own before BPE (llama.cpp calls this pre-tokenizer ``smollm``), so "2019" is four
tokens. transformers' GGUF conversion drops that step; a tokenizer without it writes numbers
the model never saw in training, which is why this one is built here and tested against the
model's own tokenization of digits.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

CONTROL = 3
"""GGUF ``token_type`` of a control token (``<|im_start|>`` …): never produced by BPE."""


def build_tokenizer(
    tokens: Sequence[str], token_types: Sequence[int], merges: Sequence[str]
) -> Tokenizer:
    vocab = {token: index for index, token in enumerate(tokens)}
    pairs = [_pair(merge) for merge in merges]
    bpe = models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False)
    tokenizer = Tokenizer(bpe)
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    control = [token for token, kind in zip(tokens, token_types, strict=True) if kind == CONTROL]
    tokenizer.add_special_tokens([AddedToken(token, special=True) for token in control])
    tokenizer.encode_special_tokens = True  # a caller who says "<|im_end|>" is only words
    return tokenizer


def _pair(merge: str) -> tuple[str, str]:
    left, right = merge.split(" ", 1)
    return left, right
