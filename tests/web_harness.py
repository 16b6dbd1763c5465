"""The browser demo under test: a server on a free loopback port, and headless Chromium whose
microphone plays a WAV file (docs/web.md, "The real-browser recipe")."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
from playwright.async_api import Page, async_playwright
from prerequisites import requires

from cadence.pipeline.config import CadenceConfig, ServerConfig, TracingConfig
from cadence.voice.audio import PCM16, resample
from cadence.voice.audio.wavfile import write_wav
from cadence.web.server import CadenceServer

CHROMIUM = Path("/usr/bin/chromium")
needs_chromium = requires(
    CHROMIUM.exists(), f"needs Chromium at {CHROMIUM} (`make chromium` installs it)"
)
"""Mark of a test that runs the page in Chromium: skipped without it, failed in CI."""
ARTIFACTS = Path(__file__).parent.parent / "test-artifacts" / "web"
"""Screenshots and measured figures of the browser tests (ignored by git)."""

SPEECH_RATE = 16000
FAKE_MIC_RATE = 48000
LEADING_SILENCE_MS = 1500
"""Chromium starts the fake microphone before the call is up; the speech must come later."""

CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--use-fake-ui-for-media-stream",
    "--use-fake-device-for-media-stream",
    "--allow-loopback-in-peer-connection",
    "--autoplay-policy=no-user-gesture-required",
    "--disable-dev-shm-usage",
)

PAGE_QUERY = "?echo-cancellation=off"
"""Chromium's echo canceller mutes the fake microphone while the reply plays."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def web_config(max_sessions: int = 8) -> CadenceConfig:
    """The default configuration (embedded models) on a free loopback port, no trace log."""
    return CadenceConfig(
        server=ServerConfig(host="127.0.0.1", port=free_port(), max_sessions=max_sessions),
        tracing=TracingConfig(jsonl_path=None),
    )


async def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    """Poll ``condition``: plain state, such as the server's calls, has no event to wait on."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(0.05)


@asynccontextmanager
async def running_server(config: CadenceConfig) -> AsyncIterator[CadenceServer]:
    async with CadenceServer(config) as server:
        yield server


def fake_microphone(path: Path, parts: Sequence[PCM16 | int]) -> Path:
    """Write what the microphone will hear: 16 kHz clips and silences (ints, in ms), after
    the leading silence. Returns the ``--use-file-for-fake-audio-capture`` argument."""
    chunks = [np.zeros(SPEECH_RATE * LEADING_SILENCE_MS // 1000, dtype=np.int16)]
    for part in parts:
        if isinstance(part, int):
            chunks.append(np.zeros(SPEECH_RATE * part // 1000, dtype=np.int16))
        else:
            chunks.append(part)
    write_wav(path, resample(np.concatenate(chunks), SPEECH_RATE, FAKE_MIC_RATE), FAKE_MIC_RATE)
    return path


@asynccontextmanager
async def chromium_page(profile: Path, microphone: Path) -> AsyncIterator[Page]:
    """A page of headless Chromium whose microphone plays ``microphone`` once."""
    args = [*CHROMIUM_FLAGS, f"--use-file-for-fake-audio-capture={microphone}%noloop"]
    async with async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(
            profile, executable_path=str(CHROMIUM), headless=True, args=args
        )
        try:
            yield context.pages[0] if context.pages else await context.new_page()
        finally:
            await context.close()
