"""A caller's requests spoken to the demo in the project's own voice, and what no line the
caller hears may hold: the demo tests' shared parts (``test_demo_conversation.py``,
``test_demo_services.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from cadence.pipeline.config import CadenceConfig, TracingConfig
from cadence.pipeline.config.loader import load_config
from cadence.pipeline.model_loading import load_tts
from cadence.pipeline.tools import Tool
from cadence.voice.audio import PCM16, resample

DEMO = Path(__file__).parents[1] / "configs" / "sgd-services.yaml"


def demo_config() -> CadenceConfig:
    """The demo's configuration, with no trace log of its own (a test writes no files)."""
    return load_config(DEMO).model_copy(update={"tracing": TracingConfig(jsonl_path=None)})


def spoken(texts: tuple[str, ...]) -> list[PCM16]:
    """``texts`` in the demo's voice, at 16 kHz."""
    config = load_config(DEMO)
    synthesizer = load_tts(config.models.tts, config.threads)
    return [
        resample(
            np.concatenate(list(synthesizer.synthesize_blocking(text))),
            synthesizer.sample_rate,
            16000,
        )
        for text in texts
    ]


def call_words(tools: list[Tool]) -> re.Pattern[str]:
    """A tool's name, or one of its parameters written as a call writes it (``city:``,
    ``party size:``): what no line the caller hears may hold."""
    words = {tool.name for tool in tools} | {
        " ".join(parameter.split("_")) + ":"
        for tool in tools
        for parameter in tool.spec.parameters.get("properties", {})
    }
    return re.compile("|".join(rf"\b{re.escape(word)}" for word in sorted(words)), re.I)
