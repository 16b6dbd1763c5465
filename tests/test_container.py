"""The deployment as a newcomer stands it up: ``deploy/Containerfile`` built with podman and
started with a configuration mounted where its command reads it and Twilio's auth token in
its environment; it answers ``/healthz``, then one Twilio call from the emulator — the
webhook ``POST`` signed as Twilio signs it, the stream that TwiML names, a question asked and
the reply heard — and drains and exits 0 on SIGTERM (``podman stop``); and deploy/k8s's
Deployment with its ConfigMap played with ``podman kube play`` on that image: its probes, a
call at the ConfigMap's public URL, and the drain of a terminating pod with a call in
progress.

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
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from container import (
    IMAGE,
    ROOT,
    RUNTIME,
    ULIMITS,
    build_image,
    ensure_base_image,
    kube_conf,
    needs_podman,
    played_manifests,
    podman,
    podman_logs,
    podman_secret,
)
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
            raise AssertionError(f"the container is {state}: {podman_logs(container)[-3000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no /healthz within {START_TIMEOUT_S} s")
        await asyncio.sleep(0.5)
    return health


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    """deploy/Containerfile built (once for the module)."""
    workdir = tmp_path_factory.mktemp("image")
    log = workdir / "build.log"
    try:
        ensure_base_image(workdir, log)
        build_image(workdir, log, BUILD_TIMEOUT_S)
    except Exception as exc:
        raise AssertionError(f"{exc}; the build's log: {log.read_text()[-4000:]}") from exc
    return IMAGE


async def call_through(port: int, public_url: str, *, hang_up: bool = True) -> TwilioEmulator:
    """One Twilio call to the server on ``port`` as Twilio makes it to ``public_url`` (the
    webhook signed over that URL, the stream the TwiML names, reached on ``port``): the
    caller asks a question and listens to the reply; the phone, hung up if ``hang_up``."""
    webhook = f"http://127.0.0.1:{port}/twilio/twiml"
    twiml = await asyncio.to_thread(
        fetch_twiml,
        webhook,
        auth_token=AUTH_TOKEN,
        params=call_details("CA" + uuid.uuid4().hex),
        signed_url=public_url.rstrip("/") + "/twilio/twiml",
    )
    host = public_url.removeprefix("https://").rstrip("/")
    assert twiml.url == f"wss://{host}/twilio"
    signature = twilio_signature(AUTH_TOKEN, twiml.url, {})
    phone = TwilioEmulator(
        f"ws://127.0.0.1:{port}/twilio", headers={"X-Twilio-Signature": signature}
    )
    await phone.__aenter__()
    await phone.pause(600)
    await phone.say(clip(CALLER).telephone_audio(), 8000)
    waited_ms = 0.0
    while sum(len(p.pcm) for p in phone.played) < 8 * 1000 and waited_ms < 60_000:
        await phone.pause(100)  # the line stays open, silent, as the reply plays
        waited_ms += 100
    heard_ms = sum(len(p.pcm) for p in phone.played) / 8
    assert heard_ms >= 1000, f"heard {heard_ms:.0f} ms of reply in {waited_ms / 1000:.0f} s"
    assert phone.first_heard_ms is not None
    assert phone.unexpected == []
    if hang_up:
        await hang_up_phone(phone)
    return phone


async def hang_up_phone(phone: TwilioEmulator) -> None:
    await phone.hang_up()
    await phone.__aexit__(None, None, None)


@pytest.mark.timeout(BUILD_TIMEOUT_S + START_TIMEOUT_S + 300)
async def test_the_image_answers_healthz_and_a_twilio_call(image: str, tmp_path: Path) -> None:
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
        image,
    )
    try:
        health = await wait_for_health(port, name)
        assert health["status"] == "ok"
        assert health["sessions"] == 0
        # Twilio's side, signed against the host Twilio would be given — here the published
        # port, with no TLS proxy in front.
        await call_through(port, f"https://127.0.0.1:{port}")
    finally:
        # SIGTERM: the server drains (no call left) and exits 0.
        podman("stop", "--time", "60", name, timeout_s=90, check=False)
        exit_code = podman("inspect", "--format", "{{.State.ExitCode}}", name, check=False)
        logs = podman_logs(name)
        podman("rm", "--force", name, check=False)
    assert exit_code.strip() == "0", logs[-3000:]


@pytest.mark.timeout(BUILD_TIMEOUT_S + START_TIMEOUT_S + 600)
async def test_the_deployment_played_answers_its_probes_a_call_and_drains(
    image: str, tmp_path: Path
) -> None:
    """deploy/k8s's Deployment with its ConfigMap, played by ``podman kube play``: its probes
    answer, Twilio's call reaches it at the public URL the ConfigMap names (the LLM service it
    names is unreachable here: the caller hears the fallback reply), and the pod terminated
    as the kubelet terminates one — SIGTERM, then the grace period — drains: ``/readyz``
    fails at once while the call goes on, and the server exits 0 once the caller hangs up.

    Terminated by hand because Debian's podman 4.3 cannot: its ``kube down`` kills the pod
    at once (exit 137) and its ``pod stop`` stops the pod's network first, so no call could
    finish; its stop timeout is set to the grace period all the same (tests/container.py)."""
    port = free_port()
    manifests, grace_s = played_manifests(tmp_path, image, port)
    cluster = yaml.safe_load((ROOT / "deploy" / "k8s" / "configmap.yaml").read_text())
    public_url = yaml.safe_load(cluster["data"]["cadence.yaml"])["telephony"]["public_url"]
    podman_secret(
        "cadence",
        {"token": uuid.uuid4().hex, "twilio-auth-token": AUTH_TOKEN, "llm-api-key": "unused"},
        tmp_path,
    )
    env = kube_conf(tmp_path, grace_s)
    container = "cadence-pod-0-cadence"
    podman(*RUNTIME, "kube", "down", str(manifests), env=env, check=False, timeout_s=120)
    podman(*RUNTIME, "kube", "play", str(manifests), env=env, timeout_s=120)
    phone: TwilioEmulator | None = None
    try:
        stop_timeout = podman("inspect", "--format", "{{.Config.StopTimeout}}", container)
        assert stop_timeout.strip() == str(grace_s)
        health = await wait_for_health(port, container)
        assert (health["status"], health["draining"]) == ("ok", False)
        assert await asyncio.to_thread(status_of, port, "/readyz") == 200
        phone = await call_through(port, public_url, hang_up=False)
        podman("kill", "--signal", "TERM", container)  # the pod is terminating
        await until(lambda: status_of(port, "/readyz") == 503, "readiness failing on the drain")
        draining = await asyncio.to_thread(healthz, port)
        assert draining is not None
        assert (draining["draining"], draining["sessions"]) == (True, 1)  # the call goes on
        assert restarts(container) == (0, "0")  # not exited
        await hang_up_phone(phone)
        phone = None
        # It exits once the call has ended — 0, drained — and, the pod's restart policy being
        # Always, podman starts it again (a kubelet would not: it knows the pod is going).
        await until(lambda: restarts(container)[0] == 1, "the drained server's exit", grace_s)
        assert restarts(container) == (1, "0")
        logs = podman_logs(container)
    finally:
        if phone is not None:
            await hang_up_phone(phone)
        podman(*RUNTIME, "kube", "down", str(manifests), env=env, check=False, timeout_s=120)
        podman("secret", "rm", "cadence", check=False)
    assert "received SIGTERM" in logs, logs[-3000:]
    assert "closing: 0 calls in progress" in logs, logs[-3000:]


def restarts(container: str) -> tuple[int, str]:
    """How often ``container`` exited and was started again, and its last exit status."""
    count, status = podman(
        "inspect", "--format", "{{.RestartCount}} {{.State.ExitCode}}", container
    ).split()
    return int(count), status


def status_of(port: int, path: str) -> int | None:
    """The HTTP status ``path`` answers with, or ``None`` if nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as answer:
            status: int = answer.status
            return status
    except urllib.error.HTTPError as refused:
        return refused.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


async def until(condition: Callable[[], bool], what: str, bound_s: float = 60) -> None:
    """Poll ``condition`` (off the loop) until it holds; fail loudly at ``bound_s``."""
    deadline = time.monotonic() + bound_s
    while not await asyncio.to_thread(condition):
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {bound_s:g} s")
        await asyncio.sleep(0.5)


def test_the_image_carries_its_graphs_and_not_the_retired_models(image: str) -> None:
    """The runtime wheel leaves the 5.9 M models out (a checkout keeps them) and the image
    holds the language models' int8 graphs, built at its build by ``cadence prepare``."""
    script = (
        "import os, pathlib, cadence.llm.checkpoint as c; "
        "print(sorted(p.name for p in c.EMBEDDED_DIR.glob('*.pt'))); "
        "print(sorted(p.name.split('-')[0] for p in "
        "pathlib.Path(os.environ['CADENCE_CACHE_DIR'], 'engines').glob('*.int8.onnx')))"
    )
    out = podman(
        "run",
        "--rm",
        *RUNTIME,
        *ULIMITS,
        "--entrypoint",
        "python3",
        image,
        "-c",
        script,
        timeout_s=120,
    )
    models, graphs = out.strip().splitlines()
    assert models == "[]"
    assert graphs == "['smollm2', 'smollm2']"  # the reply's (smollm2-ar-…) and the base's
