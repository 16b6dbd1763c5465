"""The stages of a voice turn, each wrapping one model of ``voice/`` or ``llm/``."""

from pipeline.stages.stt import STTStage
from pipeline.stages.tts import TTSStage
from pipeline.stages.vad import VADStage

__all__ = ["STTStage", "TTSStage", "VADStage"]
