"""Tiny random-weight Fast-dLLM v2 and SDAR model directories, built here with transformers
(a test-only dependency): nothing is downloaded.

Each is a real Qwen2 or Qwen3 network from transformers with every weight randomised (biases
and norms included, so a loader that skipped one would be caught), saved with
``save_pretrained`` in the layout the published checkpoints have, its ``config.json``
rewritten with the family's own keys as theirs are, and a small byte-level BPE
``tokenizer.json`` that holds Qwen's control tokens and the family's mask at their real ids.
The vocabulary therefore has to reach past the mask id, so the hidden sizes are tiny.

transformers' model classes import Triton, which must not be imported in the test process
before ``tests/test_kernels_triton.py`` sets ``TRITON_INTERPRET``: the tests build the models
in a subprocess (``python -m cadence.tooling.bench.tiny_open_weights ROOT``), which also saves
transformers' logits for :func:`reference_ids` beside each model, as the reference.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from cadence.llm.open_weights import FAST_DLLM_V2, SDAR, Family

if TYPE_CHECKING:
    from transformers import PreTrainedModel
from cadence.llm.open_weights.checks import family_tokens

TEXTS = (
    "Hello, I would like to book a table for two tonight.",
    "Sure, what time would you like the table?",
    "At seven in the evening, please.",
    "Your table for two is booked at seven.",
    "Can you find me a flight to Chicago tomorrow morning?",
    "I found a flight leaving at nine for one hundred dollars.",
    "That works, thank you very much.",
    "You are welcome. Is there anything else I can help with?",
)
REFERENCE_LOGITS = "transformers_logits.pt"
"""Beside each built model: transformers' logits for :func:`reference_ids`."""
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinySpec:
    family: Family
    block_size: int
    sharded: bool
    """Saved as shards with an index (SDAR) or as one ``model.safetensors`` (Fast-dLLM v2)."""


SPECS = {
    "fast-dllm-v2": TinySpec(FAST_DLLM_V2, 32, sharded=False),
    "sdar": TinySpec(SDAR, 4, sharded=True),
}


def tokenizer_json(family: Family) -> str:
    """A byte-level BPE trained on :data:`TEXTS` with the family's tokens at their ids."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    # Only the bytes of TEXTS, not all 256: most ids are then words and a random model's
    # replies have word boundaries for early emission to cut at.
    trainer = trainers.BpeTrainer(vocab_size=320, show_progress=False)
    tokenizer.train_from_iterator(list(TEXTS) * 4, trainer=trainer)
    data = json.loads(tokenizer.to_str())
    # The tokenizers library numbers added tokens after the model's vocabulary, so the ids
    # are pinned by entering the tokens in the vocabulary too, as Qwen's own file has them.
    data["added_tokens"] = []
    for token, token_id in family_tokens(family).items():
        data["model"]["vocab"][token] = token_id
        data["added_tokens"].append(
            {
                "id": token_id,
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        )
    return json.dumps(data)


def tokenizer_config(family: Family) -> dict[str, Any]:
    return {
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(token_id): {"content": token, "special": True}
            for token, token_id in family_tokens(family).items()
        },
        "eos_token": "<|im_end|>",
        "mask_token": family.mask_token,
    }


def reference_ids() -> torch.Tensor:
    """``[2, 45]`` token ids of the tokenizer's vocabulary, the same every time."""
    return torch.randint(0, 300, (2, 45), generator=torch.Generator().manual_seed(1))


def build(name: str, directory: Path, seed: int = 0) -> None:
    """Write the tiny model ``name`` (a key of :data:`SPECS`) to ``directory``, with
    transformers' logits for :func:`reference_ids` in :data:`REFERENCE_LOGITS`."""
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    spec = SPECS[name]
    torch.manual_seed(seed)
    shape: dict[str, Any] = {
        "vocab_size": spec.family.mask_id + 7,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 1024,
    }
    model: PreTrainedModel
    if spec.family is FAST_DLLM_V2:  # Qwen2.5, tied embeddings as in the 1.5B checkpoint
        rope = {"rope_type": "default", "rope_theta": 1e6}
        model = Qwen2ForCausalLM(
            Qwen2Config(**shape, rope_parameters=rope, tie_word_embeddings=True)
        )
    else:  # Qwen3, with its own output head as in the SDAR chat checkpoints
        rope = {"rope_type": "default", "rope_theta": 5e5}
        config = Qwen3Config(**shape, head_dim=8, rope_parameters=rope, tie_word_embeddings=False)
        model = Qwen3ForCausalLM(config)
    with torch.no_grad():
        for name_, parameter in model.named_parameters():
            noise = torch.randn_like(parameter)
            parameter.copy_(1.0 + 0.2 * noise if "norm" in name_ else 0.3 * noise)
    torch.nn.Module.eval(model)
    model.save_pretrained(directory, max_shard_size="12MB" if spec.sharded else "1GB")
    _rewrite_config(directory / "config.json", spec)
    (directory / "tokenizer.json").write_text(tokenizer_json(spec.family), encoding="utf-8")
    write_json(directory / "tokenizer_config.json", tokenizer_config(spec.family))
    with torch.inference_mode():
        torch.save(model(reference_ids()).logits, directory / REFERENCE_LOGITS)


def _rewrite_config(path: Path, spec: TinySpec) -> None:
    """The keys the published ``config.json`` files have: the family's architecture and model
    type and block size, Qwen's end-of-text id, and (SDAR, written by transformers 4)
    ``rope_theta`` at the top level rather than transformers 5's ``rope_parameters``."""
    config = json.loads(path.read_text(encoding="utf-8"))
    family = spec.family
    config.update(architectures=[family.architecture], model_type=family.model_type)
    config[family.block_size_key] = spec.block_size
    if family is FAST_DLLM_V2:
        config["eos_token_id"] = 151645
    else:
        config.update(eos_token_id=151643, mask_token_id=family.mask_id, rope_scaling=None)
        config["rope_theta"] = config.pop("rope_parameters")["rope_theta"]
    write_json(path, config)


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


if (
    __name__ == "__main__"
):  # python -m cadence.tooling.bench.tiny_open_weights ROOT: every model, in ROOT/NAME
    for spec_name in SPECS:
        build(spec_name, Path(sys.argv[1]) / spec_name)
