"""Readiness, drain and worker processes (docs/deploy.md), with real calls: the Twilio
emulator says real 8 kHz speech and every reply is judged by what the caller heard after the
clip's true end of speech.

In process: ``/readyz`` follows fullness while ``/healthz`` stays alive; a drain lets the call
in progress finish its turn and refuses a newcomer as ``draining``; a drain past its timeout
leaves the rest to the close. Then the real ``cadence serve --workers 2``, in processes of
its own: two workers answer calls on one port, and a scrape of ``/metrics`` counts the calls
of both; a pool whose workers cannot start exits with the reason; one killed mid-call ends only
its own call —
the other worker's goes on and is answered — and is replaced; SIGTERM drains the pool (the
call in progress is answered, a newcomer refused as ``draining``) and it exits with 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import psutil
import pytest
from speech_data import clip
from twilio_phone import TwilioPhone
from web_harness import wait_until, web_config
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from cadence.pipeline.tracing import TurnOutcome
from cadence.tooling.bench.calls import CallFailure, CallResult, converse, place_call
from cadence.tooling.bench.manifest import ManifestClip
from cadence.tooling.bench.runners import CallerClip
from cadence.tooling.bench.server_process import ServerProcess
from cadence.web.server import CadenceServer

CALLER = "osr_us_0034_8k_s01"
WAIT_S = 60.0
"""How long a test waits for what follows from what it did: only a broken server takes this
long, however busy the machine."""
T = TypeVar("T")


def caller_clip(clip_id: str = CALLER) -> CallerClip:
    spoken = clip(clip_id)
    return CallerClip.of(ManifestClip(spoken.id, spoken.path, spoken.text, spoken.telephone_path))


def get(url: str) -> tuple[int, dict[str, object]]:
    """A GET's status and JSON body, 503 included."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        return refused.code, json.loads(refused.read())


async def aget(url: str) -> tuple[int, dict[str, object]]:
    return await asyncio.to_thread(get, url)


async def polled(probe: Callable[[], Awaitable[T]], done: Callable[[T], bool], what: str) -> T:
    """Ask ``probe`` until its answer is ``done``: the state of another process, which has no
    event to wait on. After ``WAIT_S``, the test fails naming ``what`` and the last answer."""
    deadline = time.monotonic() + WAIT_S
    while not done(answer := await probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:.0f} s: {what} (last: {answer})")
        await asyncio.sleep(0.1)
    return answer


async def close_of(url: str) -> tuple[int, str]:
    """The close code and reason a newcomer gets, sending nothing."""
    async with connect(url) as websocket:
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(websocket.recv(), 10)
        assert websocket.close_code is not None
        return websocket.close_code, websocket.close_reason or ""


@pytest.fixture
async def server() -> AsyncIterator[CadenceServer]:
    async with CadenceServer(web_config(max_sessions=1)) as running:
        yield running
        await wait_until(lambda: not running.calls, "the calls to end")


def base(server: CadenceServer) -> str:
    return f"127.0.0.1:{server.port}"


# --- in process -------------------------------------------------------------------------------


async def test_readyz_follows_fullness_while_healthz_stays_alive(server: CadenceServer) -> None:
    assert await aget(f"http://{base(server)}/readyz") == (
        200,
        {"ready": True, "reason": None, "sessions": 0, "max_sessions": 1},
    )
    async with TwilioPhone(f"ws://{base(server)}/twilio"):
        await wait_until(lambda: len(server.calls) == 1, "the call to be admitted")
        status, ready = await aget(f"http://{base(server)}/readyz")
        assert (status, ready["ready"], ready["reason"]) == (503, False, "busy")
        status, health = await aget(f"http://{base(server)}/healthz")
        assert (status, health["status"], health["sessions"]) == (200, "ok", 1)
    await wait_until(lambda: not server.calls, "the call to end")
    status, ready = await aget(f"http://{base(server)}/readyz")
    assert (status, ready["ready"]) == (200, True)


async def test_a_drain_lets_the_call_in_progress_finish_and_refuses_newcomers(
    server: CadenceServer,
) -> None:
    speech = caller_clip()
    async with TwilioPhone(f"ws://{base(server)}/twilio") as phone:
        turn = asyncio.create_task(converse(phone, speech))
        await wait_until(lambda: len(server.calls) == 1, "the call to be admitted")
        drain = asyncio.create_task(server.drain(timeout_s=60))
        await wait_until(lambda: server.admission.draining, "the drain to begin")

        status, ready = await aget(f"http://{base(server)}/readyz")
        assert (status, ready["reason"]) == (503, "draining")
        assert await close_of(f"ws://{base(server)}/twilio") == (1013, "draining")
        assert not drain.done()

        # The turn under way when the drain began is answered after the true end of speech.
        outcome, voice_to_voice = await turn
        assert outcome is TurnOutcome.ANSWERED, outcome
        assert voice_to_voice is not None
    assert await asyncio.wait_for(drain, WAIT_S) == 0


async def test_a_drain_past_its_timeout_leaves_the_call_to_the_close(
    server: CadenceServer,
) -> None:
    async with TwilioPhone(f"ws://{base(server)}/twilio") as phone:
        await phone.pause(300)
        await wait_until(lambda: len(server.calls) == 1, "the call to be admitted")
        # The call never ends by itself: only a drain that kept to its timeout returns, and
        # it leaves the call in progress (a drain that waited for it would run into the bound).
        async with asyncio.timeout(WAIT_S):
            assert await server.drain(timeout_s=0.3) == 1
        assert len(server.calls) == 1
        assert phone.close_code is None
        await server.close()
        await phone.closed()
    assert phone.close_code == 1001


# --- worker processes -------------------------------------------------------------------------


def pool_config(tmp_path: Path) -> Path:
    """The default models, no trace log, a drain long enough for a turn."""
    config = web_config(max_sessions=4)
    drain = config.server.model_copy(update={"drain_timeout_s": 60.0})
    path = tmp_path / "pool.json"
    path.write_text(config.model_copy(update={"server": drain}).model_dump_json())
    return path


async def sessions_by_pid(pool: ServerProcess) -> dict[str, str]:
    """``cadence_sessions`` of ``/metrics``, by worker pid."""
    url = f"http://127.0.0.1:{pool.port}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
    return dict(re.findall(r'^cadence_sessions\{pid="(\d+)"\} (\S+)$', text.decode(), re.M))


def holder_of(pool: ServerProcess, phone: TwilioPhone) -> int | None:
    """The worker process that holds ``phone``'s connection, if one has taken it yet."""
    for pid in pool.worker_pids():
        for connection in psutil.Process(pid).net_connections(kind="tcp"):
            if connection.raddr and connection.raddr.port == phone.local_port:
                return pid
    return None


async def worker_of(pool: ServerProcess, phone: TwilioPhone) -> int:
    """The worker process that holds ``phone``'s connection, once one has taken it."""
    await wait_until(lambda: holder_of(pool, phone) is not None, "a worker", timeout_s=WAIT_S)
    pid = holder_of(pool, phone)
    assert pid is not None
    return pid


async def test_a_pool_whose_workers_cannot_start_exits_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A secret the configuration names but the environment lacks: each worker fails at once.
    monkeypatch.delenv("CADENCE_TEST_ABSENT_TOKEN", raising=False)
    config = web_config().model_dump(mode="json")
    config["server"]["auth_token_env"] = "CADENCE_TEST_ABSENT_TOKEN"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(config))
    pool = ServerProcess(2, path, log=tmp_path / "server.log")
    with pytest.raises(RuntimeError, match="exited with 2"):  # the CLI's bad configuration
        await pool.start()
    log = (tmp_path / "server.log").read_text()
    assert "server.auth_token_env names $CADENCE_TEST_ABSENT_TOKEN, which is not set" in log, log
    assert "failed to start" in log, log


REPLIED = (TurnOutcome.ANSWERED, TurnOutcome.TALKED_OVER)
"""A reply was heard. Whether it waited for the true end of speech is for the turn-taking
tests (test_turn_taking.py); here, on two busy cores, what counts is that the call was served."""


async def until_quiet(phone: TwilioPhone, ms: float = 3000.0) -> None:
    """Keep the line open until the agent has been silent for ``ms``: its reply is over."""
    while (heard := phone.heard_at_ms()) and phone.now_ms() - heard[-1] < ms:
        await phone.pause(100)


async def test_two_workers_on_one_port_a_killed_one_is_replaced_and_sigterm_drains(
    tmp_path: Path,
) -> None:
    pool = ServerProcess(2, pool_config(tmp_path), log=tmp_path / "server.log")
    speech = caller_clip()
    opened: list[TwilioPhone] = []
    try:
        await pool.start()
        url = f"ws://127.0.0.1:{pool.port}/twilio"
        first = set(pool.worker_pids())
        assert len(first) == 2

        # Calls are placed until each worker holds one (the kernel picks the worker).
        phones: dict[int, TwilioPhone] = {}
        for _ in range(16):
            phone = TwilioPhone(url)
            await phone.__aenter__()
            opened.append(phone)
            await phone.pause(200)
            holder = await worker_of(pool, phone)
            if holder not in phones:
                phones[holder] = phone
            else:
                await phone.hang_up()
            if len(phones) == 2:
                break
        assert len(phones) == 2, "16 calls all went to one worker"
        (victim, doomed), (survivor, kept) = phones.items()

        # Whichever worker answers a scrape, the metrics are every worker's (the spare
        # calls may take a moment to be released).
        expected = {str(victim): "1.0", str(survivor): "1.0"}
        await polled(lambda: sessions_by_pid(pool), expected.__eq__, "one call per worker")

        # Both workers answer a turn each, at once, on the one port.
        replies = await asyncio.gather(converse(doomed, speech), converse(kept, speech))
        assert [outcome in REPLIED for outcome, _ in replies] == [True, True], replies
        await asyncio.gather(until_quiet(doomed), until_quiet(kept))

        # Killed mid-turn: its own call is cut, the other worker's call goes on and is answered.
        said = doomed.utterances
        doomed_turn = asyncio.create_task(converse(doomed, speech))
        kept_turn = asyncio.create_task(converse(kept, speech))
        await wait_until(lambda: doomed.utterances > said, "the caller to speak", timeout_s=WAIT_S)
        os.kill(victim, signal.SIGKILL)
        with pytest.raises(ConnectionClosed):
            await doomed_turn
        outcome, _ = await kept_turn
        assert outcome in REPLIED, outcome
        await kept.hang_up()

        # The pool starts a worker in its place; a new call is answered.
        await wait_until(
            lambda: len(pool.worker_pids()) == 2 and victim not in pool.worker_pids(),
            "a worker in place of the killed one",
            timeout_s=120,
        )
        assert survivor in pool.worker_pids()
        result = CallResult(0, 0.0)
        await place_call(url, speech, result, time.monotonic())
        assert result.outcome in REPLIED, result

        # SIGTERM: the call in progress finishes its turn, a newcomer is refused, exit 0.
        last = TwilioPhone(url)
        await last.__aenter__()
        opened.append(last)
        turn = asyncio.create_task(converse(last, speech))
        await wait_until(lambda: last.utterances > 0, "the caller to speak", timeout_s=WAIT_S)
        pool.signal(signal.SIGTERM)
        await polled(
            lambda: aget(f"http://127.0.0.1:{pool.port}/readyz"),
            lambda answer: answer[0] == 503,
            "/readyz to turn to 503 after SIGTERM",
        )
        refused = CallResult(1, 0.0)
        await place_call(url, speech, refused, time.monotonic())
        # Told so by the worker that took it, or — by a worker whose port was closing as the
        # call arrived (the other worker drains at once: it holds no call) — at the handshake.
        assert refused.outcome is CallFailure.REFUSED, refused
        assert refused.detail in ("draining", "HTTP 503"), refused
        outcome, _ = await turn
        assert outcome in REPLIED, outcome
        await last.hang_up()
        assert pool.process is not None
        assert await asyncio.wait_for(pool.process.wait(), 30) == 0
    finally:
        for phone in opened:
            await phone.hang_up()  # once more for any a failure left open: it is idempotent
        await pool.stop()
