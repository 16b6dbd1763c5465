"""Backchannels and requests to wait, told by their words — as whisper writes them."""

from __future__ import annotations

import pytest

from cadence.voice.turn.cues import is_backchannel, is_hold_request
from cadence.voice.turn.numbers import number_goes_on, trailing_digits


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


@pytest.mark.parametrize(
    ("text", "agent"),
    [("My number is 415.", None), ("My number is 415. 458.", None), ("415-458", "Your phone?"),
     ("It's four one five,", "What number can I reach you at?"), ("My number is 559 268", None),
     ("The card number is 4417 2210", None), ("my card is 4417", None)],
)  # fmt: skip
def test_a_phone_or_card_number_stopped_between_its_groups_goes_on(
    text: str, agent: str | None
) -> None:
    assert number_goes_on(text, agent)


@pytest.mark.parametrize(
    ("text", "agent"),
    [("My number is 415-458-7777.", None), ("A table for 2.", None), ("Book it for 1030.", None),
     ("It's at 1 7 4 0", "What is the address?"), ("Room 305.", "Which room?"),
     ("My number is 415, thanks.", None), ("", None), ("My card is 4417 22", None)],
)  # fmt: skip
def test_numbers_that_are_whole_or_not_a_phone_or_card_do_not(text: str, agent: str | None) -> None:
    assert not number_goes_on(text, agent)


def test_the_digits_are_read_however_whisper_wrote_them() -> None:
    assert trailing_digits("My number is 415. 458.") == "415458"
    assert trailing_digits("four one five, oh two") == "41502"
    assert trailing_digits("call me") == ""
