"""Load the models a configuration names: the one place where config meets ``voice/``.

Each model is loaded once per process (cached in ``voice/``, or here), so every session shares
one copy.
"""

from __future__ import annotations

from functools import cache

import torch

from cadence.core.priority import URGENT_WORK
from cadence.llm.adapted import CONFIG_KEY as ADAPTER_KEY
from cadence.llm.adapted import Precision, is_adapter, load_adapted
from cadence.llm.checkpoint import CheckpointError
from cadence.llm.engine import set_engine_threads
from cadence.llm.pretrained import (
    EMBEDDED,
    Calibration,
    LanguageModel,
    PretrainedModelError,
    TurnEndModel,
    load_language_model,
    model_file,
)
from cadence.llm.pretrained.gguf_weights import read_gguf
from cadence.llm.pretrained.options import LanguageModelOptions
from cadence.pipeline.config import (
    CadenceConfig,
    EndOfTurnConfig,
    STTConfig,
    ThreadsConfig,
    TTSConfig,
)
from cadence.pipeline.end_of_turn import EndOfTurnDetector
from cadence.voice.stt import Transcriber, load_transcriber
from cadence.voice.stt.transcriber import WhisperOptions
from cadence.voice.tts import PhraseSplitter, Synthesizer, load_synthesizer
from cadence.voice.turn import TextEndOfTurnModel


def apply_thread_budget(threads: ThreadsConfig) -> None:
    """Give torch and the language model's int8 graphs their share of the cores (whisper and
    the voice get theirs when they load), and set how long background work waits for urgent
    work. Call
    it before any thread runs torch: each thread keeps the count it started with, and threads
    started later take this one. Process-wide, so an overlay has no budget of its own."""
    torch.set_num_threads(threads.llm)
    set_engine_threads(threads.llm)
    URGENT_WORK.max_wait_ms = threads.background_wait_ms


def load_stt(config: STTConfig, threads: ThreadsConfig) -> Transcriber:
    return load_transcriber(
        WhisperOptions(
            model=config.model,
            device=config.device,
            compute_type=config.compute_type,
            cpu_threads=threads.stt,
            workers=threads.stt_workers,
            beam_size=config.beam_size,
            language=config.language,
            encoder_window_s=config.encoder_window_s,
        )
    )


def load_tts(config: TTSConfig, threads: ThreadsConfig) -> Synthesizer:
    return load_synthesizer(config.voice, threads.tts)


def prepare_fixed_phrases(config: CadenceConfig) -> None:
    """Synthesize ahead the phrases of ``config`` that never change — the filler above all,
    which is said precisely when the caller is waiting — so that none waits for synthesis
    (blocking: call it while loading)."""
    # Not `turn.hold_reply`: said at once, it would land in the pause after "hold on," of a
    # caller who goes on ("…let me find my card"); synthesis gives them the moment to.
    fixed = [
        config.tools.filler,
        config.tools.goodbye,
        config.faults.transcript_fallback,
        config.faults.reply_fallback,
    ]
    splitter = PhraseSplitter(config.models.tts.first_phrase_max_words)
    # Kept as TTS will ask for them: phrase by phrase, as the splitter cuts them.
    phrases = [phrase for text in fixed for phrase in splitter.phrases(text)]
    load_tts(config.models.tts, config.threads).keep(phrases)


def load_end_of_turn(config: EndOfTurnConfig, lm: LanguageModelOptions) -> EndOfTurnDetector:
    """A call's detector; the model under it is loaded once per process."""
    return EndOfTurnDetector(
        config,
        _text_end_of_turn_model() if config.model == "text" else None,
        load_turn_end_model(lm) if config.model == "lm" else None,
    )


def load_turn_end_model(options: LanguageModelOptions) -> TurnEndModel:
    """The pretrained language model of ``models.lm`` as an end-of-turn scorer (blocking, the
    first time: a few seconds to read and pack the weights)."""
    return _turn_end_model(options.model, options.precision)


@cache
def _turn_end_model(name: str, precision: Precision) -> TurnEndModel:
    if is_adapter(name):  # the reply model's own network: one model in memory for both
        try:
            adapted = load_adapted(name, torch.device("cpu"), precision)
        except CheckpointError as exc:
            raise PretrainedModelError(str(exc).replace(ADAPTER_KEY, "models.lm.model")) from exc
        head = read_gguf(model_file(EMBEDDED, "models.lm.model"), tensors=False)
        network = LanguageModel(adapted.network, head.tokenizer, name)
        return TurnEndModel(network, Calibration.shipped(name))
    path = model_file(name, "models.lm.model")
    return TurnEndModel(load_language_model(path, precision))


@cache
def _text_end_of_turn_model() -> TextEndOfTurnModel:
    return TextEndOfTurnModel.load()
