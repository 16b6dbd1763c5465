"""The demo page as a first-time visitor meets it: what the agent can talk about, who has the
floor (listening, thinking, speaking) as the call goes, every turn's waterfall on one time
scale with a legend, figures with their counts, a layout that holds on a phone, and the icon.
The call is real: headless Chromium, a recorded voice as the microphone, the embedded models.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Page, ViewportSize
from speech_data import clip
from web_harness import (
    ARTIFACTS,
    PAGE_QUERY,
    chromium_page,
    fake_microphone,
    needs_chromium,
    running_server,
    wait_until,
    web_config,
)

from cadence.pipeline.events import TraceEvent
from cadence.pipeline.tracing import AnchorEvent, TurnTrace
from cadence.web.page_events import page_event

A = AnchorEvent

ANSWERED = {
    A.USER_SPEECH_END: 1000.0,
    A.STT_FINAL: 990.0,
    A.ENDPOINT: 1200.0,
    A.LLM_FIRST_EMIT: 1220.0,
    A.TTS_FIRST_AUDIO: 1300.0,
    A.AUDIO_OUT_FIRST: 1310.0,
}


def trace(events: dict[AnchorEvent, float], **annotations: bool | str) -> TurnTrace:
    return TurnTrace(session_id="page-test", turn=0, events=events, annotations=annotations)


@pytest.mark.parametrize(
    ("turn", "outcome", "in_time", "talked_over_by_ms"),
    [
        (trace(ANSWERED), "answered", True, None),
        (trace({**ANSWERED, A.INTERRUPTED: 2000.0}, heard="Sure"), "interrupted", True, None),
        (trace({**ANSWERED, A.USER_SPEECH_END: 1400.0}), "talked_over", False, 90.0),
        (trace({A.USER_SPEECH_END: 1000.0, A.ENDPOINT: 1200.0}), "unanswered", False, None),
        (trace(ANSWERED, withdrawn=True), "withdrawn", False, None),
    ],
)
def test_the_page_gets_each_turn_with_the_servers_outcome(
    turn: TurnTrace, outcome: str, in_time: bool, talked_over_by_ms: float | None
) -> None:
    event = page_event(TraceEvent(turn))
    assert event is not None
    assert event["trace"] == turn.model_dump(mode="json", by_alias=True)
    assert (event["outcome"], event["answered_in_time"]) == (outcome, in_time)
    assert event["talked_over_by_ms"] == talked_over_by_ms


def fetch(url: str) -> tuple[int, str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.headers["Content-Type"], response.read()


async def test_the_icon_is_served_and_the_page_says_what_the_agent_can_talk_about() -> None:
    config = web_config()
    async with running_server(config) as server:
        for path in ("/favicon.ico", "/static/favicon.svg"):
            status, content_type, body = await asyncio.to_thread(fetch, server.url + path[1:])
            assert (status, content_type) == (200, "image/svg+xml"), path
            assert body.startswith(b"<svg"), path
        status, content_type, body = await asyncio.to_thread(fetch, server.url + "page.json")
    assert (status, content_type) == (200, "application/json")
    page = json.loads(body)
    assert page == {"scope": config.server.page.scope, "examples": config.server.page.examples}
    assert 2 <= len(page["examples"]) <= 3  # the defaults, for the embedded model


# --- a real call in Chromium -----------------------------------------------------------------

UTTERANCES = ("ds_arctic_a0024", "sb_spk1_snt2", "sb_spk2_snt4")
"""One utterance per width the page is shown at; their speech starts at once or after
near-silence (see the conversation test of ``test_web_browser.py``)."""
GAP_MS = 7000
"""Silence after each utterance: the reply is over before the next one, on a busy machine too."""

WIDTHS = {
    "desktop": ViewportSize(width=1280, height=900),
    "phone390": ViewportSize(width=390, height=844),
    "phone360": ViewportSize(width=360, height=780),
}
"""Viewports (CSS px) the page is shown at: one utterance each, then the cards at every one."""
PHASES = ("listening", "thinking", "speaking")

WATCH_PHASES = """() => {
  const phase = document.getElementById("phase");
  window.phaseLog = [];
  new MutationObserver(() => window.phaseLog.push(phase.dataset.phase))
    .observe(phase, {attributes: true, attributeFilter: ["data-phase"]});
}"""
"""Records every phase the page shows, as it shows it."""

EVERY_TURN_TRACED = """() => window.cadence.cards.length >=
  [...window.cadence.turns.values()].filter(turn => turn.committed).length"""
"""Every turn the conversation shows has its card: a turn's trace follows its reply."""

CARD_GEOMETRY = """() => [...document.querySelectorAll("#waterfall figure.turn")].map(card => {
  const box = (element) => element.getBoundingClientRect();
  const stage = card.querySelector(".row[data-stage]");
  const grid = [...stage.querySelectorAll(".grid")].map((line) => box(line).left);
  const ticks = [...card.querySelectorAll(".axis .tick")].map((tick) => {
    const track = box(tick.closest(".track"));
    const x = track.left + (parseFloat(tick.style.left) / 100) * track.width;
    return {ms: Number(tick.dataset.ms), x};
  });
  const first = ticks[0], last = ticks[ticks.length - 1];
  return {
    card: box(card).width,
    track: box(stage.querySelector(".track")).width,
    zero: box(stage.querySelector(".grid.zero")).left,
    budget: box(stage.querySelector(".budget-line")).left,
    pxPerMs: (grid[grid.length - 1] - grid[0]) / (last.ms - first.ms),
    tickOffGrid: Math.max(...ticks.map((tick, i) => Math.abs(tick.x - grid[i]))),
    ticks: ticks.length,
  };
})"""
"""Where each turn card draws its time axis, in CSS px of the viewport."""


@dataclass
class Shot:
    width: str
    phase: str
    clean: bool
    """The page showed ``phase`` from before the screenshot until after it."""


SHOT_TRIES = 3
"""A pause mid-sentence can end a turn for a moment: the screenshot of that short "thinking"
is taken again when the page shows it next, after the utterance's real end."""


async def shoot_phase(page: Page, width: str, phase: str) -> Shot:
    """Wait until the page shows ``phase``, and take its picture while it does."""
    for _ in range(SHOT_TRIES):
        await page.wait_for_function(
            f"window.cadence.phase === {json.dumps(phase)}", timeout=30_000, polling=20
        )
        before = await page.evaluate("window.phaseLog.length")
        await page.screenshot(path=ARTIFACTS / f"page_{width}_{phase}.png")
        changes = await page.evaluate(f"window.phaseLog.slice({before})")
        if all(seen == phase for seen in changes):
            return Shot(width, phase, clean=True)
    return Shot(width, phase, clean=False)


def runs(log: list[str]) -> list[str]:
    """``log`` without repeats: the phases in the order they were shown."""
    return [phase for i, phase in enumerate(log) if i == 0 or log[i - 1] != phase]


@needs_chromium
async def test_a_visitor_sees_the_scope_who_speaks_and_one_scale_on_every_width(
    tmp_path: Path,
) -> None:
    config = web_config()
    microphone = fake_microphone(
        tmp_path / "microphone.wav", [p for c in UTTERANCES for p in (clip(c).audio(), GAP_MS)]
    )
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shots: list[Shot] = []
    geometry: dict[str, list[dict[str, Any]]] = {}
    async with (
        running_server(config) as server,
        chromium_page(tmp_path / "profile", microphone) as page,
    ):
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.set_viewport_size(WIDTHS["desktop"])
        await page.goto(server.url + PAGE_QUERY)
        await page.evaluate(WATCH_PHASES)
        await page.wait_for_function("document.getElementById('scope-text').textContent !== ''")
        before_call = await page.inner_text("#scope-text")  # read before deciding to call
        await page.get_by_role("button", name="Start talking").click()
        await page.wait_for_selector("#status[data-state=connected]", timeout=20_000)
        for width, viewport in WIDTHS.items():  # one utterance at each width
            await page.set_viewport_size(viewport)
            for phase in PHASES:
                shots.append(await shoot_phase(page, width, phase))
        await page.wait_for_function(EVERY_TURN_TRACED, timeout=30_000, polling=200)
        seen = {
            "live": await page.get_attribute("#phase-text", "aria-live"),
            "scope": await page.inner_text("#scope-text"),
            "examples": await page.locator("#examples li").all_inner_texts(),
            "legend": await page.inner_text("#legend"),
            "stages": await page.locator("#legend-stages li").count(),
            "counts": await page.locator("#stats .count").all_inner_texts(),
            "v2v": await page.evaluate("[window.cadence.serverV2V, window.cadence.pageV2V]"),
            # Each card says how sure the end of turn was and the wait it chose, from its trace.
            "decided": await page.evaluate(
                """[...document.querySelectorAll('#waterfall figure.turn')].map(card => [
                  card.querySelector('.end-of-turn')?.textContent ?? null,
                  window.cadence.cards.find(c => String(c.trace.turn) === card.dataset.turn)
                    ?.trace.annotations?.end_of_turn_p ?? null])"""
            ),
        }
        for width, viewport in WIDTHS.items():
            await page.set_viewport_size(viewport)
            geometry[width] = await page.evaluate(CARD_GEOMETRY)
            overflow = await page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"{width}: the page scrolls sideways by {overflow} px"
            await page.screenshot(path=ARTIFACTS / f"page_{width}_turns.png", full_page=True)
        await page.get_by_role("button", name="Hang up").click()
        await wait_until(lambda: not server.calls, "the server to end the call")
        log = await page.evaluate("window.phaseLog")

    assert not errors
    # Who has the floor, in order, as the page showed it while the call went on.
    phases = runs(log)
    assert phases[0] == "connecting", phases
    assert phases[-1] == "idle", phases
    assert any(
        phases[i : i + 4] == ["listening", "thinking", "speaking", "listening"]
        for i in range(len(phases))
    ), phases
    assert set(phases) <= {"connecting", "idle", *PHASES}, phases
    assert seen["live"] == "polite"
    taken = {(shot.width, shot.phase) for shot in shots if shot.clean}
    assert taken == {(width, phase) for width in WIDTHS for phase in PHASES}, shots
    # What to say, from the configuration.
    assert before_call == seen["scope"] == config.server.page.scope
    assert seen["examples"] == [f"“{text}”" for text in config.server.page.examples]
    # The legend explains the marks; the figures say how many turns they stand on.
    for words in ("Dashed box", "Red line", "Hatched", "same scale", "ms early"):
        assert words in seen["legend"]
    assert seen["stages"] == 5
    decided = [(text, p) for text, p in seen["decided"] if p is not None]
    assert decided, seen["decided"]
    for text, p in decided:
        shown = re.fullmatch(r"P\(end of turn\) (\d\.\d\d), waited \S+ ms", text)
        assert shown is not None, text
        assert abs(float(shown[1]) - p) <= 0.0051, (text, p)
    server_v2v, page_v2v = seen["v2v"]
    assert seen["counts"] == [str(len(server_v2v)), str(len(page_v2v))]
    assert server_v2v, "no turn was answered after the end of speech"
    # One time scale: a millisecond is as wide, and 0 and the budget line are at the same
    # place, in every card; on a phone the bars get most of the card.
    for width, cards in geometry.items():
        assert len(cards) >= 2, (width, cards)
        for card in cards:
            assert card["pxPerMs"] == pytest.approx(cards[0]["pxPerMs"], abs=1e-3), width
            assert card["zero"] == pytest.approx(cards[0]["zero"], abs=0.5), width
            assert card["budget"] == pytest.approx(cards[0]["budget"], abs=0.5), width
            assert card["ticks"] >= 3, width
            assert card["tickOffGrid"] <= 1, width  # the labels sit on the bars' grid lines
        if width.startswith("phone"):
            assert all(card["track"] >= 0.6 * card["card"] for card in cards), (width, cards)
    figures = {"phases": phases, "shots": [vars(shot) for shot in shots], "geometry": geometry}
    (ARTIFACTS / "page.json").write_text(json.dumps(figures, indent=2) + "\n")
