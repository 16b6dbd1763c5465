"""The stages of a voice turn, each wrapping one model of ``voice/`` or ``llm/``."""

from cadence.pipeline.stages.stt import STTStage
from cadence.pipeline.stages.tts import TTSStage
from cadence.pipeline.stages.vad import VADStage

__all__ = ["STTStage", "TTSStage", "VADStage"]
