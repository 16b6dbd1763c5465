"""Backchannels and requests to wait, told by their words — as whisper writes them."""

from __future__ import annotations

import pytest

from cadence.voice.turn.cues import is_backchannel, is_hold_request


@pytest.mark.parametrize(
    "text",
    ["Uh-huh.", "uh huh", "Mm-hmm.", "mhm", "Yeah.", "Yeah, yeah.", "Okay.", "OK", "Right.",
     "Oh, okay.", "I see.", "Got it.", "Sure.", "", "  ", "...", "you", "Thank you."],
)  # fmt: skip
def test_backchannels_and_sounds_without_words(text: str) -> None:
    assert is_backchannel(text)


@pytest.mark.parametrize(
    "text",
    ["Yes, I want to book it.", "No.", "Wait, what time?", "Okay, but what about Sunday?",
     "I see the problem here.", "Stop.", "Two people.", "yeah yeah yeah yeah"],
)  # fmt: skip
def test_words_that_say_something_are_not_backchannels(text: str) -> None:
    assert not is_backchannel(text)


@pytest.mark.parametrize(
    "text",
    ["Hold on.", "hold on", "Hang on a second.", "One moment, let me find my card.",
     "Just a sec.", "Give me a minute please.", "Wait a second.", "Stop talking.",
     "Please be quiet.", "Sorry, one moment.", "Um, hold on, let me check my calendar."],
)  # fmt: skip
def test_requests_to_wait(text: str) -> None:
    assert is_hold_request(text)


@pytest.mark.parametrize(
    "text",
    ["Hold on, what time do you close?", "Can you hold my reservation?", "I'll wait outside.",
     "One ticket please.", "A table for two.", "Okay.", "Um.", "",
     "Let me know when the train leaves tomorrow morning at nine please.",
     "Let me see, I want the nine o'clock train."],
)  # fmt: skip
def test_turns_that_only_mention_waiting_are_turns(text: str) -> None:
    assert not is_hold_request(text)
