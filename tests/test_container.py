"""The deployment as a newcomer stands it up: ``deploy/Containerfile`` built with podman and
started with a configuration mounted where its command reads it and Twilio's auth token in
its environment; it answers ``/healthz``, then one Twilio call from the emulator — the
webhook ``POST`` signed as Twilio signs it, the stream that TwiML names, a question asked and
the reply heard — and drains and exits 0 on SIGTERM (``podman stop``).

How the image is built on this machine (a base made from Debian's packages, pip's own setup
carried in, the sandbox's limits): ``tests/container.py``. The first build installs the
dependencies (minutes); later ones reuse that layer until pyproject.toml changes. That first
build alone is over half of the whole suite's time budget, so ``make test`` leaves this test out
and ``make test-container`` (``CADENCE_CONTAINER_TEST=1``) runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from container import IMAGE, RUNTIME, ULIMITS, build_image, ensure_base_image, needs_podman, podman
from speech_data import clip
from web_harness import free_port

from cadence.tooling.emulators.twilio import TwilioEmulator, call_details, fetch_twiml
from cadence.web.access import twilio_signature

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("CADENCE_CONTAINER_TEST") != "1",
        reason="builds and starts the image (minutes): `make test-container` runs it",
    ),
    needs_podman,
]

AUTH_TOKEN = "fedcba9876543210fedcba9876543210"
AUTH_TOKEN_ENV = "CADENCE_TWILIO_AUTH_TOKEN"
CALLER = "osr_us_0034_8k_s01"
BUILD_TIMEOUT_S = 1800
START_TIMEOUT_S = 240
"""The port opens once the models are loaded, in a container sharing two cores."""


def healthz(port: int) -> dict[str, object] | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as answer:
            health: dict[str, object] = json.load(answer)
            return health
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


async def wait_for_health(port: int, container: str) -> dict[str, object]:
    """``/healthz``, once the server answers it (polled: nothing to wait on across the
    container's boundary)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while (health := await asyncio.to_thread(healthz, port)) is None:
        state = podman("inspect", "--format", "{{.State.Status}}", container).strip()
        if state != "running":
            raise AssertionError(f"the container is {state}: {podman('logs', container)[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no /healthz within {START_TIMEOUT_S} s")
        await asyncio.sleep(0.5)
    return health


@pytest.mark.timeout(BUILD_TIMEOUT_S + START_TIMEOUT_S + 300)
async def test_the_image_answers_healthz_and_a_twilio_call(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    try:
        ensure_base_image(tmp_path, log)
        build_image(tmp_path, log, BUILD_TIMEOUT_S)
    except Exception as exc:
        raise AssertionError(f"{exc}; the build's log: {log.read_text()[-4000:]}") from exc

    port = free_port()
    config = tmp_path / "cadence.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "server": {"host": "0.0.0.0", "port": 8080, "max_sessions": 2},
                "telephony": {"twilio_auth_token_env": AUTH_TOKEN_ENV},
                "tracing": {"jsonl_path": None},
            }
        )
    )
    config.chmod(0o644)  # read by the image's unprivileged user
    name = f"cadence-test-{uuid.uuid4().hex[:8]}"
    podman(
        "run",
        "--detach",
        "--name",
        name,
        *RUNTIME,
        *ULIMITS,
        "--publish",
        f"127.0.0.1:{port}:8080",
        "--volume",
        f"{config}:/etc/cadence/cadence.yaml:ro",
        "--env",
        f"{AUTH_TOKEN_ENV}={AUTH_TOKEN}",
        IMAGE,
    )
    try:
        health = await wait_for_health(port, name)
        assert health["status"] == "ok"
        assert health["sessions"] == 0

        # Twilio's side: the webhook, then the stream it names (signed against the host
        # Twilio would be given — here the published port, with no TLS proxy in front).
        webhook = f"http://127.0.0.1:{port}/twilio/twiml"
        twiml = await asyncio.to_thread(
            fetch_twiml,
            webhook,
            auth_token=AUTH_TOKEN,
            params=call_details("CA" + uuid.uuid4().hex),
            signed_url=webhook.replace("http://", "https://"),
        )
        assert twiml.url == f"wss://127.0.0.1:{port}/twilio"
        signature = twilio_signature(AUTH_TOKEN, twiml.url, {})
        async with TwilioEmulator(
            twiml.url.replace("wss://", "ws://"), headers={"X-Twilio-Signature": signature}
        ) as phone:
            await phone.pause(600)
            await phone.say(clip(CALLER).telephone_audio(), 8000)
            waited_ms = 0.0
            while sum(len(p.pcm) for p in phone.played) < 8 * 1000 and waited_ms < 60_000:
                await phone.pause(100)  # the line stays open, silent, as the reply plays
                waited_ms += 100
            await phone.hang_up()
        heard_ms = sum(len(p.pcm) for p in phone.played) / 8
        assert heard_ms >= 1000, f"heard {heard_ms:.0f} ms of reply in {waited_ms / 1000:.0f} s"
        assert phone.first_heard_ms is not None
        assert phone.unexpected == []
    finally:
        # SIGTERM: the server drains (no call left) and exits 0.
        podman("stop", "--time", "60", name, timeout_s=90, check=False)
        exit_code = podman("inspect", "--format", "{{.State.ExitCode}}", name, check=False)
        logs = podman("logs", name, check=False)
        podman("rm", "--force", name, check=False)
    assert exit_code.strip() == "0", logs[-3000:]
