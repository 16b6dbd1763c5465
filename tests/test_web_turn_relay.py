"""A visitor the server cannot reach directly: headless Chromium and the server reach each
other only through a TURN relay the test starts (coturn on 127.0.0.2), both peers held to
relayed candidates (``server.ice_transport_policy: relay``, which the page is handed with
the servers and this call's credentials) — and a conversation turn is held over it.

What proves there was no other path: every candidate either side offered is a relayed one
on the TURN server's address, the pair the page's ICE agent chose joins two relayed
candidates, and coturn granted the allocations.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import WebSocket
from speech_data import clip
from turn_relay import TURN_HOST, coturn, needs_coturn
from web_harness import (
    PAGE_QUERY,
    chromium_page,
    fake_microphone,
    needs_chromium,
    running_server,
    wait_until,
    web_config,
)

from cadence.pipeline.config import CadenceConfig

pytestmark = [needs_chromium, needs_coturn]

SECRET_ENV = "CADENCE_TEST_TURN_SECRET"

SELECTED_PAIR = """async () => {
  const stats = await window.cadence.call.pc.getStats();
  const byId = new Map([...stats.values()].map((r) => [r.id, r]));
  for (const report of stats.values())
    if (report.type === "transport" && report.selectedCandidatePairId) {
      const pair = byId.get(report.selectedCandidatePairId);
      const local = byId.get(pair.localCandidateId), remote = byId.get(pair.remoteCandidateId);
      return {local: [local.candidateType, local.address],
              remote: [remote.candidateType, remote.address]};
    }
  return null;
}"""

INBOUND_AUDIO = """async () => {
  const stats = await window.cadence.call.pc.getStats();
  for (const report of stats.values())
    if (report.type === "inbound-rtp" && report.kind === "audio")
      return {packets: report.packetsReceived, energy: report.totalAudioEnergy ?? 0};
  return {packets: 0, energy: 0};
}"""


def relayed_config(turn_url: str) -> CadenceConfig:
    base = web_config().model_dump()
    base["server"] |= {
        "ice_servers": [{"urls": [turn_url], "secret_env": SECRET_ENV}],
        "ice_transport_policy": "relay",
    }
    return CadenceConfig.model_validate(base)


def candidates(sdp: str) -> list[tuple[str, str]]:
    """Each ``a=candidate`` line's address and type."""
    found = re.findall(r"^a=candidate:\S+ \d+ \S+ \d+ (\S+) \d+ typ (\S+)", sdp, re.M)
    return [(address, kind) for address, kind in found]


class Signaling:
    """The signaling messages both ways, as the page's websocket carried them."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []

    def listen(self, websocket: WebSocket) -> None:
        websocket.on("framesent", lambda payload: self.sent.append(json.loads(payload)))
        websocket.on("framereceived", lambda payload: self.received.append(json.loads(payload)))

    def sdp(self, messages: list[dict[str, Any]], kind: str) -> str:
        return str(next(m["sdp"] for m in messages if m["type"] == kind))


async def test_a_turn_through_a_relay_only_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    question = clip("ds_arctic_a0024")
    microphone = fake_microphone(tmp_path / "microphone.wav", [question.audio(), 8000])
    with coturn(tmp_path) as turn:
        monkeypatch.setenv(SECRET_ENV, turn.secret)
        signaling = Signaling()
        page_errors: list[str] = []
        async with (
            running_server(relayed_config(turn.url)) as server,
            chromium_page(tmp_path / "profile", microphone) as page,
        ):
            page.on("pageerror", lambda error: page_errors.append(str(error)))
            page.on("websocket", signaling.listen)
            await page.goto(server.url + PAGE_QUERY)
            await page.get_by_role("button", name="Start talking").click()
            await page.wait_for_selector("#status[data-state=connected]", timeout=30_000)
            pair = await page.evaluate(SELECTED_PAIR)
            # A turn: the caller's question transcribed, answered, and the answer played.
            await page.wait_for_function(
                "window.cadence.traces.some(t => t.annotations.transcript)",
                timeout=60_000,
                polling=200,
            )
            await page.wait_for_selector(
                "#conversation .message.agent[data-state=done]", timeout=30_000
            )
            traces = await page.evaluate("() => window.cadence.traces")
            audio = await page.evaluate(INBOUND_AUDIO)
            await page.get_by_role("button", name="Hang up").click()
            await wait_until(lambda: not server.calls, "the server to end the call")
        allocations = turn.allocations()

    hello = next(m for m in signaling.received if m["type"] == "hello")
    assert hello["ice_transport_policy"] == "relay"
    [handed] = hello["ice_servers"]
    assert handed["urls"] == [turn.url]
    assert re.fullmatch(r"\d+:cadence", handed["username"])  # minted for this call
    assert handed["credential"] != turn.secret
    offer = candidates(signaling.sdp(signaling.sent, "offer"))
    answer = candidates(signaling.sdp(signaling.received, "answer"))
    assert offer, "the page offered no candidate"
    assert answer, "the server answered no candidate"
    assert {kind for _, kind in offer + answer} == {"relay"}, (offer, answer)
    assert {address for address, _ in offer + answer} == {TURN_HOST}
    assert pair == {"local": ["relay", TURN_HOST], "remote": ["relay", TURN_HOST]}, pair
    assert allocations >= 2, "coturn granted no allocation to one of the peers"

    assert not page_errors
    [turn_trace, *_] = [t for t in traces if t["annotations"].get("transcript")]
    assert "voice_to_voice" in turn_trace["latencies_ms"], turn_trace
    assert audio["energy"] > 0.01, audio  # the reply was heard in the page, relayed
