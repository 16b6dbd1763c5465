"""Cadence inside another program: play a recording as a caller would, print the conversation,
save the agent's spoken reply. Run it as ``python examples/embed.py CALLER.wav REPLY.wav``."""

import asyncio
import contextlib
import sys
from pathlib import Path

import numpy as np

from cadence.pipeline.agent import Agent
from cadence.pipeline.events import (
    AgentTextEvent,
    ReplyAudioEvent,
    ReplyPlayedEvent,
    TranscriptEvent,
)
from cadence.pipeline.session import VoiceSession
from cadence.voice.audio.wavfile import read_audio, write_wav


async def caller(session: VoiceSession, recording: Path) -> None:
    """The caller's line: 20 ms of audio every 20 ms, the recording then silence."""
    audio = read_audio(recording, 8000)  # any rate will do; this one is a phone line's
    silence = np.zeros(160, np.int16)
    for start in range(0, len(audio), 160):
        await session.feed(audio[start : start + 160], sample_rate=8000)
        await asyncio.sleep(0.02)
    while True:
        await session.feed(silence, sample_rate=8000)
        await asyncio.sleep(0.02)


async def main(recording: Path, reply_path: Path) -> None:
    agent = Agent()  # the default configuration: embedded models, fully offline
    await agent.load()  # fails here, naming the config key, if a model is missing
    session = await agent.open_session(output_sample_rate=16000)  # no output: audio as events
    reply: list[np.ndarray] = []
    async with session:  # closed on the way out: every task finished, the trace written
        line = asyncio.create_task(caller(session, recording))
        async for event in session.events:
            match event:
                case TranscriptEvent(text=text, final=True):
                    print(f"caller: {text}")
                case AgentTextEvent(text=text):
                    print(f"agent:  …{text}")
                case ReplyAudioEvent(pcm=pcm):
                    reply.append(pcm)  # 20 ms at a time, in real time: play it, or keep it
                case ReplyPlayedEvent():
                    break  # the whole reply went out
        line.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await line
    write_wav(reply_path, np.concatenate(reply), 16000)
    print(f"history: {session.history}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
