"""The typed options of the turn generator: which backend, which model, how it decodes, and
the OpenAI-compatible service of ``backend: openai``.

They are the ``models.llm`` section of the configuration, which embeds this class as it is:
``llm`` owns its options and never imports the configuration schema.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from cadence.core.options import Options


class OpenAIOptions(Options):
    """An OpenAI-compatible chat-completions service, streamed (`backend: openai`); see
    docs/llm.md and configs/mercury.yaml."""

    base_url: str | None = None
    """API root the `/chat/completions` path is appended to, e.g.
    `https://api.inceptionlabs.ai/v1`; required with `backend: openai`."""
    model: str | None = None
    """Model name sent with each request, e.g. `mercury-2`; required with `backend: openai`."""
    api_key_env: str = "CADENCE_LLM_API_KEY"
    """Name of the environment variable holding the API key, which is sent as a bearer token.
    The key itself never goes in a configuration and is never logged; if the variable is unset
    the agent fails to load."""
    extra_body: dict[str, Any] = Field(default_factory=dict)
    """Added verbatim to each request's JSON body: the service's own options, e.g. Mercury 2's
    `{realtime: true, reasoning_effort: instant}`."""
    system_prompt: str = (
        "You are a helpful voice assistant on a phone call. Answer in one or two short "
        "sentences of plain spoken English, without lists or markdown."
    )
    """First message of every request; empty = none."""
    max_tokens: int = Field(150, ge=1)
    """Length cap of one reply, in the service's tokens."""
    connect_timeout_ms: int = Field(1000, ge=1)
    """Give up connecting (TCP and TLS) after this long."""
    first_piece_timeout_ms: int = Field(1500, ge=1)
    """If no words of the reply have come this long after the request, the caller hears
    `faults.reply_fallback` instead and the turn's trace gets `llm_error`."""
    stall_timeout_ms: int = Field(1000, ge=1)
    """A reply that sends nothing for this long ends there (with `faults.reply_fallback` if
    none of it was spoken yet), reported as `llm_error`."""
    reply_timeout_ms: int = Field(15_000, ge=1)
    """A reply still streaming after this long is cut off there, reported the same way."""


class LLMOptions(Options):
    backend: Literal["dllm", "ar", "openai"] = "ar"
    """`ar` = autoregressive decoding; `dllm` = block diffusion (a diffusion adapter, or an
    open-weight block-diffusion model); `openai` = OpenAI-compatible streaming service (see
    `openai`). It must fit the checkpoint."""
    checkpoint: str = "embedded:smollm2-ar"
    """`embedded:smollm2-ar` = SmolLM2-135M-Instruct with the shipped autoregressive adapter
    (tool calls, the SGD services' manners; the default: it won on `cadence eval-lm`,
    docs/llm.md); `embedded:smollm2-dllm` = its block-diffusion twin (backend `dllm`; still
    short of training); an adapter file (`.safetensors`); the directory of an open-weight
    block-diffusion model, Fast-dLLM v2 or SDAR (told apart by its `config.json`; see
    configs/fast-dllm-v2.yaml and configs/sdar.yaml); or the 5.9 M models trained from scratch,
    `embedded:dllm` / `embedded:ar` (kept as the tests' small models)."""
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    """Where the generator runs. On `cuda` the block-diffusion decode step uses the Triton
    kernels and replays one captured CUDA graph per step (docs/kernels.md); `auto` = `cuda`
    when there is one."""
    precision: Literal["auto", "int8", "bf16", "fp32"] = "auto"
    """For a SmolLM2 adapter: `int8` = the merged network's int8 graph on onnxruntime, built
    once into the cache folder (a decode step 28 ms against 42 ms in float32 on a 2-core AVX2
    CPU, one thread; docs/llm.md, "The engine"); `bf16` = weights packed for oneDNN (CPUs with
    AVX-512 BF16); `fp32` = the PyTorch network as trained; `auto` = `int8` on the CPU, `bf16`
    on a GPU."""
    block_size: int = Field(8, ge=1)
    """Tokens denoised together by `embedded:dllm`; attention is bidirectional inside a block
    (an adapter or open-weight model keeps the block size it was trained with)."""
    confidence_threshold: float = Field(0.7, gt=0.0, le=1.0)
    """Each denoising step commits every masked position at least this confident (τ). 0.7 was
    chosen on sgd_dev: the BLEU of 0.9 with 3.1 instead of 4.0 steps per block (docs/llm.md)."""
    first_emit_budget_ms: float = Field(150.0, gt=0.0)
    """When the first block runs late against this, the threshold is lowered (linearly, to
    0 at twice the budget)."""
    block_budget_ms: float = Field(150.0, gt=0.0)
    """The same rule for each later block, timed from the block's start."""
    max_reply_tokens: int = Field(48, ge=1)
    """Length cap of one reply."""
    history_turns: int = Field(3, ge=1)
    """Past turns the generator sees; older turns are dropped first."""
    max_context_tokens: int = Field(128, ge=8)
    """The oldest of those turns are also dropped until the history fits this many tokens."""
    openai: OpenAIOptions = OpenAIOptions()
    """The service of `backend: openai`."""

    @model_validator(mode="after")
    def _openai_needs_a_service(self) -> LLMOptions:
        if self.backend == "openai" and not (self.openai.base_url and self.openai.model):
            raise ValueError("backend `openai` needs `openai.base_url` and `openai.model`")
        return self
