"""The pretrained language model as the end-of-turn signal (docs/end-of-turn.md): SmolLM2 read
from the pip wheel into Cadence's own network, checked against an independent implementation
(transformers' Llama on the same file), its call cache, its scores, its command line and its
failure when the wheel is missing."""

from __future__ import annotations

import itertools
import json
import socket
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from cadence.cli.app import app
from cadence.llm.pretrained import (
    INSTALL,
    Calibration,
    PretrainedModelError,
    TurnEndModel,
    load_language_model,
    model_file,
    smollm2,
)
from cadence.llm.pretrained.gguf_weights import read_gguf
from cadence.llm.pretrained.turn_end import FEATURES
from cadence.pipeline.config import EndOfTurnConfig
from cadence.pipeline.end_of_turn import EndOfTurnDetector
from cadence.tooling.training.turn_end_lm import CalibrationRun, calibrate_turn_lm

KEY = "models.lm.model"


@pytest.fixture(scope="module")
def gguf() -> Path:
    return model_file(smollm2.EMBEDDED, KEY)


@pytest.fixture(scope="module")
def scorer(gguf: Path) -> TurnEndModel:
    return TurnEndModel(load_language_model(gguf))


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: object, **__: object) -> None:
        raise AssertionError("the default path touched the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_the_network_computes_what_transformers_computes_from_the_same_file(
    gguf: Path, no_network: None
) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ours = load_language_model(gguf, "fp32")
    theirs = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    their_tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    text = "I'd like a table for 2 at 7:30 on March 5th, please."
    ids = ours.message("assistant", "How many people?") + ours.open_message("user", text)
    rendered = their_tokenizer.apply_chat_template(
        [
            {"role": "system", "content": "x"},
            {"role": "assistant", "content": "How many people?"},
            {"role": "user", "content": text},
        ],
        tokenize=False,
    )
    # The same ChatML ids as the model's own template (less its system message and the end).
    their_ids = their_tokenizer(rendered, add_special_tokens=False).input_ids
    assert their_ids[-len(ids) - 2 : -2] == ids
    cache = ours.new_conversation()
    got = cache.log_probs(ids)[0]
    with torch.no_grad():
        want = torch.log_softmax(theirs(torch.tensor([ids])).logits[0, -1], dim=-1)
    assert torch.allclose(got, want, atol=1e-4)


def test_the_cache_computes_only_what_a_new_transcript_changed(scorer: TurnEndModel) -> None:
    model = scorer.model
    session = scorer.session()
    context = scorer.context("Where would you like to eat?")
    session.prefill("Where would you like to eat?")
    assert session.conversation.tokens_computed == len(context)
    partials = ["I want", "I want to eat at", "I want to eat at an Italian place"]
    session.p_end(partials[0], "Where would you like to eat?")
    for before, after in itertools.pairwise(partials):
        computed = session.conversation.tokens_computed
        session.p_end(after, "Where would you like to eat?")
        added = len(model.encode(after)) - len(model.encode(before))
        # The words that were new, and no more (BPE may redo the last token of the old text).
        assert added <= session.conversation.tokens_computed - computed <= added + 1
    # Asking again for the same words computes nothing; a change at the end recomputes the end.
    computed = session.conversation.tokens_computed
    session.probability("I want to eat at an Italian place", "Where would you like to eat?")
    session.probability("I want to eat at an Italian place", "Where would you like to eat?")
    assert session.conversation.tokens_computed - computed <= 1
    computed = session.conversation.tokens_computed
    session.p_end("I want to eat at an Indian place", "Where would you like to eat?")
    assert 1 <= session.conversation.tokens_computed - computed <= 3


def test_sentence_ends_scored_in_the_same_pass_equal_a_pass_of_their_own(gguf: Path) -> None:
    model = load_language_model(gguf, "fp32")
    ids = model.open_message("user", "is the restaurant open on sundays")
    marks = [model.encode(mark)[0] for mark in (".", "?", "!")]
    together = model.new_conversation().log_probs(ids, marks)
    for row, mark in enumerate(marks, start=1):
        alone = model.new_conversation().log_probs([*ids, mark])[0]
        assert torch.allclose(together[row], alone, atol=1e-4)


def test_the_agents_question_makes_an_answer_more_complete(scorer: TurnEndModel) -> None:
    session = scorer.session()
    threshold = scorer.calibration.threshold
    # A whole answer to the question asked, against the same words with no question before.
    for answer, question in [
        ("Two.", "How many people will be in your party?"),
        ("Tomorrow.", "Which day would you like to go?"),
        ("San Jose.", "Which city are you in?"),
    ]:
        assert session.probability(answer, question) > session.probability(answer, None)
    assert session.probability("San Jose.", "Which city are you in?") >= threshold
    # "two" is a whole answer to "how many people?" and half of one to nothing; whisper's "Two."
    # is read as it was said (the capital is whisper's, not the caller's).
    party = "How many people will be in your party?"
    assert session.probability("two", party) >= threshold
    assert session.probability("two", None) < threshold
    assert session.probability("Two.", party) == pytest.approx(
        session.probability("two", party), abs=1e-4
    )
    # Words that cannot end a sentence stay unfinished, whatever was asked.
    assert session.probability("I'd like a table for", "What can I do for you?") < 0.2


def test_finished_requests_score_above_the_same_requests_cut_short(scorer: TurnEndModel) -> None:
    # Requests written for this test, never seen by the calibration.
    requests = [
        "Can you move my appointment to Friday morning?",
        "I need a taxi to the airport at six.",
        "What time does the pharmacy close tonight?",
        "Please cancel my order from last week.",
    ]
    session = scorer.session()
    for request in requests:
        whole = session.probability(request)
        words = request.split()
        for cut in range(1, len(words)):
            prefix = " ".join(words[:cut])
            if prefix.endswith(("to", "the", "at", "my", "from", "does", "my")):
                assert session.probability(prefix) < whole, (prefix, request)


def test_a_score_does_not_depend_on_how_the_transcript_arrived(scorer: TurnEndModel) -> None:
    # The int8 graph quantizes each row's activations on its own: the same words score the
    # same whether they came word by word, as one transcript, or after a transcript that was
    # taken back (a batch-wide scale would move them by tenths: docs/end-of-turn.md).
    asked = "Where would you like to eat?"
    words = ["I", "want", "to", "eat", "at", "an", "Italian", "place", "in", "San", "Jose"]
    direct = scorer.session().p_end(" ".join(words), asked)
    grown = scorer.session()
    grown.prefill(asked)
    for count in range(1, len(words) + 1):
        grown.p_end(" ".join(words[:count]), asked)
    assert grown.p_end(" ".join(words), asked) == pytest.approx(direct, abs=1e-5)
    corrected = scorer.session()
    corrected.p_end("I want to eat at an Indian place near the station", asked)
    assert corrected.p_end(" ".join(words), asked) == pytest.approx(direct, abs=1e-5)


async def test_a_partial_transcript_is_cached_unscored_and_the_speculative_one_costs_its_words(
    scorer: TurnEndModel,
) -> None:
    detector = EndOfTurnDetector(EndOfTurnConfig(model="lm"), lm=scorer)
    asked = "What can I do for you?"
    await detector.prepare(asked)
    conversation = detector.conversation
    assert conversation is not None
    model = scorer.model
    context = len(scorer.context(asked))
    partial, whole = "I'd like to book", "I'd like to book a table for two"
    await detector.listen(partial, agent_text=asked, urgent=False)
    assert conversation.tokens_computed == context + len(model.encode(partial))
    assert conversation.ids == [*scorer.context(asked), *model.encode(partial)]
    computed = conversation.tokens_computed
    await detector.listen(whole, agent_text=asked, urgent=True)
    new_words = len(model.encode(whole)) - len(model.encode(partial))
    # Only the new words: the last of them gives the logits the score reads.
    assert conversation.tokens_computed - computed == new_words
    # The final transcript finds its score ready (nothing left to compute), and it equals one
    # computed from nothing.
    computed = conversation.tokens_computed
    final = await detector.probability(whole, agent_text=asked)
    assert conversation.tokens_computed == computed
    assert final == pytest.approx(scorer.session().probability(whole, asked), abs=1e-5)


def test_a_missing_wheel_fails_naming_the_key_and_the_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(smollm2, "PACKAGE", "no_such_package_here")
    with pytest.raises(PretrainedModelError) as failure:
        model_file(smollm2.EMBEDDED, KEY)
    assert KEY in str(failure.value)
    assert INSTALL in str(failure.value)
    with pytest.raises(PretrainedModelError, match=KEY):
        model_file("/no/such/model.gguf", KEY)


def test_the_gguf_tokenizer_splits_digits_as_the_model_was_trained(gguf: Path) -> None:
    tokenizer = read_gguf(gguf).tokenizer
    digits = [tokenizer.decode([i]) for i in tokenizer.encode("2019", add_special_tokens=False).ids]
    assert digits == ["2", "0", "1", "9"]
    # A caller who says a control token says words.
    assert tokenizer.token_to_id("<|im_end|>") not in tokenizer.encode("<|im_end|>").ids


def test_turn_score_uses_the_configured_model(tmp_path: Path) -> None:
    lines = "I need a rental car in Anaheim.\nI want to fly to\n"
    result = CliRunner().invoke(app, ["turn-score"], input=lines)
    assert result.exit_code == 0, result.output
    scores = [line.split("\t") for line in result.stdout.splitlines()]
    assert [text for _, text in scores] == lines.splitlines()
    complete, cut = (float(p) for p, _ in scores)
    assert complete >= Calibration.shipped().threshold > 0.2 > cut
    # The old model, chosen by the configuration, scores the same words its own way.
    config = tmp_path / "text.yaml"
    config.write_text("turn:\n  end_of_turn:\n    model: text\n")
    result = CliRunner().invoke(app, ["turn-score", "--config", str(config)], input=lines)
    assert result.exit_code == 0, result.output
    assert [line.split("\t")[1] for line in result.stdout.splitlines()] == lines.splitlines()
    assert result.stdout != "\n".join("\t".join(score) for score in scores) + "\n"


def test_the_calibration_fits_and_ranks_whole_turns_above_cut_ones(
    tmp_path: Path, scorer: TurnEndModel
) -> None:
    sample = Path(__file__).parent / "data" / "dialogue" / "sgd_tools_dev_sample.jsonl"
    out = tmp_path / "calibration.json"
    run = CalibrationRun(validation=sample, out=out, max_dialogues=6, test=None)
    metrics = calibrate_turn_lm(scorer, run, lambda _: None)
    written = json.loads(out.read_text())
    assert written["features"] == list(FEATURES)
    assert len(written["weights"]) == len(FEATURES)
    # Fit on these turns, it must at least rank them: whole turns above their mid-sentence cuts.
    assert metrics["validation"]["at_threshold"]["auc_complete_vs_clear"] > 0.8


def test_the_reply_adapter_can_score_the_end_of_turn_on_the_replys_own_network() -> None:
    # `models.lm.model: embedded:smollm2-ar`: one network in memory for both, its own
    # calibration; kept optional because it reads speech outside the task dialogues worse
    # (docs/end-of-turn.md, "One model or two").
    from cadence.llm.adapted import load_adapted
    from cadence.llm.pretrained.options import LanguageModelOptions
    from cadence.pipeline.model_loading import load_turn_end_model

    scorer = load_turn_end_model(LanguageModelOptions(model="embedded:smollm2-ar"))
    assert scorer.model.network is load_adapted("embedded:smollm2-ar", torch.device("cpu")).network
    assert scorer.calibration != Calibration.shipped()
    session = scorer.session()
    asked = "What can I do for you?"
    # Ranked: each request whole above itself cut after a word no sentence ends on.
    for request, cut in [
        ("I need a taxi to the airport at six.", "I need a taxi to the"),
        ("I'm looking for an American restaurant in San Jose.", "I'm looking for an"),
        ("Please cancel my order.", "Please cancel my"),
    ]:
        assert session.probability(cut, asked) < session.probability(request, asked), request
    assert session.probability("Please cancel my order.", asked) >= scorer.calibration.threshold
