"""The text end-of-turn model: the shipped weights on held-out complete and truncated
utterances, its robustness to how Whisper writes, ``cadence turn-score``, a broken weights file,
and training on a toy corpus.

The held-out utterances are from the SGD test split (google-research-datasets/
dstc8-schema-guided-dialogue, CC-BY-SA-4.0), which the model never trained or was tuned on:
user turns drawn with a fixed seed (``random.Random(17)`` over the first 400 dialogues), and
prefixes of others cut at a random word boundary that is not a sentence end. Prefixes that are
complete sentences by themselves ("Nope" of "Nope that's it") were dropped by hand: no text
model can tell those apart, and ``latency_reports/end-of-turn-text`` counts them separately.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from cadence.cli.app import app
from cadence.cli.turn_cmd import EXIT_BAD_INPUT
from cadence.llm.dialogue import Turn
from cadence.tooling.cli import turn_cmd
from cadence.tooling.training.corpus import Dialogue, write_dialogues
from cadence.voice.turn import TextEndOfTurnModel, TextEndOfTurnModelError
from cadence.voice.turn.features import FEATURE_VERSION

runner = CliRunner()

COMPLETE = [
    ("I appreciate your assistance.", "Your vehicle is booked."),
    ("That will work perfectly. Thank you.", "Ok, there is a flight available that you might be "
     "interested in. It is an American Airlines flight costing $571."),
    ("Can you try looking for music events in Atlanta, GA?",
     "Which city should I look for music events?"),
    ("I am planning a trip. I will need three tickets. The tickets will be for a one way flight "
     "on Thursday next week.", None),
    ("Can you order three tickets for me?", "No problem. How many tickets would you like?"),
    ("I appreciate that.", "Have a pleasant listening experience."),
    ("I'd like to pick it up at half past 1 in the afternoon and I need cars in Washington.",
     "Where would you like to rent the car from and when will you pick it up?"),
    ("And how much is admission?", "It's at 245 Charles E Young Drive East"),
    ("Thanks so much for your help, that is all I need.",
     "495 Jefferson Street and they charge $396 per night."),
    ("It's a restaurant called Amalfi, please try that.",
     "Is there a specific restaurant you'd like to make the reservation for?"),
    ("Perfect! Thank you for the assistance.", "Yes, tickets start at $55."),
    ("That's going to be the 7th of March.", "What is the travel date you were planning on?"),
    ("I want to fly NYC.", "Where do you want to go?"),
    ("I need a rental car in Anaheim.", None),
    ("No. Thanks so much.", "Is there anything else you need today?"),
    ("This is perfect for me.", "The connecting flight United Airlines takes off at 1:20 pm."),
    ("No.Thank you!", "Can I help you with anything else?"),
    ("How much does it cost per day?",
     "I have found 10 cars available at the Anaheim Intermodal Center."),
    ("I need 1 room. Is there any others that meet my needs?",
     "I have found a 5 star hotel, located at 45 Park Lane."),
    ("Yes please, also what's their address?", "Confirming you want 3 rooms in London"),
    ("Yes, I think I may like to hear this song now. Thanks.",
     "What about the song Good Together by Shy Martin? Do you like it to listen now?"),
    ("I am searching for a hotel.", None),
    ("That works for me. Please go ahead and reserve the rental car.",
     "I found a nice SUV of Alfa Romeo Stelvio available for pick up at Union Plaza."),
]  # fmt: skip
"""Whole user turns of sgd_test, with the agent's turn before them."""

TRUNCATED = [
    ("When will", "What about using American Airlines: You can depart at 3:05 am."),
    ("I", "When will you return it?"),
    ("I'll be", "How many nights?"),
    ("Find me", "No problem, what city would you like me to search in?"),
    ("Let me know the cost of", "How about an event name Aftershock Festival? Do you like it?"),
    ("Can you", None),
    ("That sounds like a good", "How about another 3 star hotel, Aparthotel Adagio?"),
    ("Whats", "I have the 11 Howard, a 3 star hotel"),
    ("Cool! Thank you very much. You've been very helpful. That will be",
     "I got a ticket for 1 passenger. The inbound flight lands at 0:52 am."),
    ("Thanks.That's", "The car was reserved.$29.00 is the cost per day."),
    ("I wish to travel on", "What date are interested in traveling and what is your destination?"),
    ("No, I'm sorry, I forgot he is not bring his",
     "You would like a table for 4 at Aq, located in San Francisco. Is that right?"),
    ("Actually, I am", "To confirm then, you would like a taxi, preferably Luxury, right?"),
    ("Would these be Economy class tickets? What",
     "American Airlines has a connecting flight at 1:10 pm, for $442."),
    ("That sounds good. I", "The cost per day is $34.00."),
    ("Sounds really", "How about the 3 star hotel called Abbey Court Hotel (hyde park)?"),
    ("Please", "Please tell me your origin and destination cities."),
    ("No, that is all I", "Can I help with anything else?"),
    ("I'll be picking up in Rio and I'll need it",
     "Sure, when do you need the car until and where do you want to pick it up?"),
    ("Can you help me find", None),
]  # fmt: skip
"""Prefixes of sgd_test user turns cut mid-sentence (the rest: "this flight arrive?", …)."""


@pytest.fixture(scope="module")
def model() -> TextEndOfTurnModel:
    return TextEndOfTurnModel.load()


def test_the_shipped_model_loads_with_its_threshold(model: TextEndOfTurnModel) -> None:
    assert 0.0 < model.threshold < 1.0
    assert model.metadata["trained_by"] == "cadence train-turn-model"
    assert "sgd_test" not in model.metadata["training"]["corpora"]


def test_held_out_complete_and_truncated_utterances_are_told_apart(
    model: TextEndOfTurnModel,
) -> None:
    complete = [model.is_complete(text, agent_text=agent) for text, agent in COMPLETE]
    truncated = [not model.is_complete(text, agent_text=agent) for text, agent in TRUNCATED]
    # On sgd_dev the model gets ~90 % of complete turns and ~93 % of mid-sentence prefixes
    # right; these bars leave room for a handful of 23 and 20, not for a broken model.
    assert sum(complete) >= 19, [t for (t, _), ok in zip(COMPLETE, complete, strict=True) if not ok]
    assert sum(truncated) >= 18, [
        t for (t, _), ok in zip(TRUNCATED, truncated, strict=True) if not ok
    ]
    # And as a ranking: a complete turn outscores a truncated one nearly always.
    scores_c = [model.score(t, agent_text=a) for t, a in COMPLETE]
    scores_t = [model.score(t, agent_text=a) for t, a in TRUNCATED]
    pairs = [c > t for c in scores_c for t in scores_t]
    assert sum(pairs) / len(pairs) >= 0.9


@pytest.mark.parametrize(
    ("written", "spoken"),
    [
        ("I'd like a table for 2 people, please.", "i'd like a table for two people please"),
        ("My zip code is 9 4 1 0 3.", "my zip code is nine four one zero three"),
        ("It's $20.", "it's twenty dollars"),
        ("Book it for 7:30 PM.", "book it for seven thirty pm"),
        ("CAN YOU FIND ME A HOTEL?", "can you find me a hotel"),
    ],
)
def test_punctuation_casing_and_numbers_do_not_change_the_score(
    model: TextEndOfTurnModel, written: str, spoken: str
) -> None:
    assert model.score(written) == pytest.approx(model.score(spoken), abs=1e-9)


def test_dangling_words_fillers_and_hesitations_read_as_incomplete(
    model: TextEndOfTurnModel,
) -> None:
    complete = "book a table for two at seven thirty tonight"
    assert model.is_complete(complete)
    assert model.is_complete(f"um {complete}")  # a filler at the start changes nothing
    assert model.is_complete("book a table for two at uh seven thirty tonight")
    for hesitation in ["and um", "so um", "uh", "and"]:
        assert not model.is_complete(f"{complete} {hesitation}"), hesitation
    for dangling in ["I'd like to book a table for", "I want to fly to", "Can you find me a"]:
        assert not model.is_complete(dangling), dangling


def test_a_misheard_or_missing_word_leaves_the_decision(model: TextEndOfTurnModel) -> None:
    assert model.is_complete("can you find me a hotel in san jose")
    assert model.is_complete("can you find me a hotel in san hose")  # a name misheard
    assert model.is_complete("can you find me hotel in san jose")  # "a" missed
    assert model.is_complete("what is the whether like in london tomorrow")
    assert model.is_complete("i need rental car in anaheim")
    assert not model.is_complete("can you find me a hotel in")


def test_the_agent_question_makes_a_short_answer_complete(model: TextEndOfTurnModel) -> None:
    asked = model.score("two", agent_text="How many people will be in your party?")
    assert asked >= model.threshold
    assert asked > model.score("two", agent_text=None)


def test_an_empty_transcript_is_not_a_finished_turn(model: TextEndOfTurnModel) -> None:
    assert model.score("") == 0.0
    assert model.score("  ,. ") < model.threshold


def test_turn_score_writes_a_probability_and_the_utterance_per_line(tmp_path: Path) -> None:
    lines = ["I need a rental car in Anaheim.", "I want to fly to", "", "five five"]
    result = runner.invoke(app, ["turn-score"], input="\n".join(lines) + "\n")
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines()
    assert len(out) == len(lines)
    for line, utterance in zip(out, lines, strict=True):
        p, text = line.split("\t", 1)
        assert re.fullmatch(r"[01]\.\d{3}", p)
        assert 0.0 <= float(p) <= 1.0
        assert text == utterance
    assert float(out[0].split("\t")[0]) > float(out[1].split("\t")[0])

    file = tmp_path / "utterances.txt"
    file.write_text("\n".join(lines) + "\n")
    from_file = runner.invoke(app, ["turn-score", str(file)])
    assert from_file.exit_code == 0, from_file.output
    assert from_file.stdout == result.stdout
    dash = runner.invoke(app, ["turn-score", "-"], input="two\n")
    with_agent = runner.invoke(app, ["turn-score", "-", "--agent", "How many?"], input="two\n")
    assert dash.exit_code == with_agent.exit_code == 0
    assert dash.stdout != with_agent.stdout


def test_a_missing_or_broken_weights_file_fails_at_load_with_its_name(tmp_path: Path) -> None:
    missing = tmp_path / "missing.npz"
    with pytest.raises(TextEndOfTurnModelError, match=r"missing\.npz.*do not exist"):
        TextEndOfTurnModel.load(missing)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip file")
    with pytest.raises(TextEndOfTurnModelError, match=r"garbage\.npz.*not a readable"):
        TextEndOfTurnModel.load(garbage)
    partial = tmp_path / "partial.npz"
    np.savez(partial, weights=np.zeros(16, np.float16))
    with pytest.raises(TextEndOfTurnModelError, match=r"lack bias"):
        TextEndOfTurnModel.load(partial)
    other = tmp_path / "other.npz"
    np.savez(
        other,
        weights=np.zeros(16, np.float16),
        bias=np.float32(0),
        threshold=np.float32(0.5),
        feature_version=np.int32(FEATURE_VERSION + 1),
        metadata=np.str_("{}"),
    )
    with pytest.raises(TextEndOfTurnModelError, match=r"features v"):
        TextEndOfTurnModel.load(other)

    result = runner.invoke(app, ["turn-score", "--weights", str(missing)], input="hello\n")
    assert result.exit_code == EXIT_BAD_INPUT
    assert "missing.npz" in result.output


def _toy_corpus() -> list[Dialogue]:
    """Complete turns all end in "please", and no prefix of one does: separable by the last
    word, which the model must find among the noise of the rest."""
    items = ["coffee", "tea", "latte", "mocha", "juice", "water", "bagel", "muffin", "cookie"]
    sizes = ["a small", "a large", "one", "two", "a medium", "three"]
    dialogues = []
    for i in range(120):
        item, size = items[i % len(items)], sizes[(i // len(items)) % len(sizes)]
        turns = (
            Turn("user", f"I would like {size} {item} with milk please"),
            Turn("agent", "Anything else?"),
            Turn("user", f"and then {size} {items[(i + 3) % len(items)]} to go please"),
        )
        dialogues.append(Dialogue(id=f"toy-{i}", turns=turns))
    return dialogues


def _train_toy(tmp_path: Path, name: str) -> tuple[Path, dict[str, object]]:
    corpus = tmp_path / "toy.jsonl"
    write_dialogues(corpus, _toy_corpus())
    out = tmp_path / f"{name}.npz"
    metrics = tmp_path / f"{name}.json"
    args = ["train-turn-model", "--corpus", str(corpus), "--validation", str(corpus)]
    args += ["--test", "", "--out", str(out), "--metrics", str(metrics)]
    args += ["--dim-bits", "12", "--epochs", "4", "--lr", "0.05", "--seed", "3"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return out, json.loads(metrics.read_text())


def test_training_learns_a_separable_toy_pattern_deterministically(tmp_path: Path) -> None:
    out, metrics = _train_toy(tmp_path, "a")
    model = TextEndOfTurnModel.load(out)
    assert model.dim == 1 << 12
    assert model.is_complete("I would like a large mocha with milk please")
    assert model.is_complete("and then two cookie to go please")
    assert not model.is_complete("I would like a large mocha with")
    assert not model.is_complete("and then two cookie to go")
    validation = metrics["validation"]
    assert isinstance(validation, dict)
    assert validation["clean"]["complete"]["accuracy"] == 1.0
    assert validation["clean"]["incomplete"]["accuracy"] == 1.0
    assert "--dim-bits 12" in str(metrics["command"])

    again, _ = _train_toy(tmp_path, "b")
    with np.load(out) as first, np.load(again) as second:
        for field in ("weights", "bias", "threshold"):
            np.testing.assert_array_equal(first[field], second[field])


def test_the_command_defaults_are_the_training_defaults() -> None:
    from cadence.tooling.training.end_of_turn_options import TurnModelOptions

    defaults = TurnModelOptions(corpora=(), validation=Path(), out=Path())
    options = inspect.signature(turn_cmd.train_turn_model).parameters

    def default(name: str) -> object:
        return options[name].default.default

    assert 1 << int(str(default("dim_bits"))) == defaults.dim
    assert default("epochs") == defaults.epochs
    assert default("learning_rate") == defaults.learning_rate
    assert default("seed") == defaults.seed
