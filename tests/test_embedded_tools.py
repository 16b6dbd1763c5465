"""Tool calls by the embedded models: how a call and a result are written for them, the SGD
corpus read as calls and results, a checkpoint grown for tools, a model trained here calling
a tool and answering from its result, and the offline SGD services it calls."""

from __future__ import annotations

import asyncio
import json
import shutil
from functools import cache
from pathlib import Path

import llm_tiny
import pytest
import torch

from cadence.core.clock import VirtualClock
from cadence.llm.checkpoint import LoadedModel, load_model
from cadence.llm.decoding import ReplyStats
from cadence.llm.dialogue import ToolCall, Turn
from cadence.llm.dialogue_format import DialogueFormat
from cadence.llm.emission import CallReader, WordEmitter, last_pieces
from cadence.llm.generator import (
    AutoregressiveTurnGenerator,
    GeneratorOptions,
)
from cadence.llm.result_slots import ReplyFacts, SlotFiller, latest_rows, with_slots
from cadence.llm.spoken_values import said_values
from cadence.llm.tool_text import ToolTextError, call_text, parse_call, result_text
from cadence.llm.tools import ToolSpec
from cadence.pipeline.config import ToolsConfig
from cadence.pipeline.tools import BUILTIN_TOOLS, AskTheCaller, ToolSelectionError, offered_tools
from cadence.pipeline.tools.context import ToolContext
from cadence.pipeline.tools.keypad import Keypad
from cadence.pipeline.tools.sgd_services import SGDCatalogue, packaged_catalogue, sgd_service_tools
from cadence.tooling.training.corpus import read_dialogues
from cadence.tooling.training.evaluation import evaluate_backend
from cadence.tooling.training.in_lane import (
    DECLINE,
    HELD_OUT_NOISE,
    REPEAT,
    TRAINING_TASKS,
    behaves,
    build_lane_corpus,
    lane_kind,
)
from cadence.tooling.training.sgd_catalogue import build_catalogue
from cadence.tooling.training.tool_evaluation import (
    entity_lexicon,
    hallucinated_entities,
    same_call,
)
from cadence.tooling.training.trainer import FINAL_MODEL, TrainOptions, train

DATA = Path(__file__).parent / "data" / "dialogue"
SAMPLE = DATA / "sgd_tools_sample.jsonl"


def test_a_call_round_trips_through_its_text() -> None:
    arguments = {"city": "San Jose", "time": "11:30", "party_size": "2", "date": "2019-03-01"}
    text = call_text("ReserveRestaurant", arguments)
    assert text == (
        "ReserveRestaurant city: San Jose; time: 11:30; party size: 2; date: 2019-03-01"
    )
    assert parse_call(text) == ("ReserveRestaurant", arguments)
    assert parse_call("GetWeather") == ("GetWeather", {})


@pytest.mark.parametrize("garbage", ["", "city: San Jose", "Find x y", "Find city San Jose"])
def test_what_is_not_a_call_is_refused_saying_why(garbage: str) -> None:
    with pytest.raises(ToolTextError):
        parse_call(garbage)


def test_a_call_with_a_garbled_field_stands_on_the_fields_that_parse() -> None:
    """What a diffusion model wrote, committing several positions at once."""
    text = "ReserveRestaurant city: San Jose; time: :00; time] 12:30; party size: 2"
    assert parse_call(text) == (
        "ReserveRestaurant",
        {"city": "San Jose", "time": ":00", "party_size": "2"},
    )


def test_a_result_is_read_names_first_without_what_the_call_said() -> None:
    rows = [{"city": "San Jose", "phone_number": "408-971-8523", "restaurant_name": "Bazille"}]
    result = json.dumps({"n_results": 10, "results": rows})
    assert result_text(result, {"city": "San Jose"}) == (
        "10 results: restaurant name: Bazille; phone number: 408-971-8523"
    )
    assert result_text(json.dumps({"n_results": 0, "results": []})) == "0 results"
    assert result_text('{"ok": true}') == "ok: true"
    assert result_text("not json") == "not json"


def test_an_sgd_agent_turn_with_a_call_becomes_the_call_its_result_and_the_words() -> None:
    raw = json.loads(SAMPLE.read_text().splitlines()[0])
    dialogue = read_dialogues(SAMPLE, 1)[0]
    calls = [t for t in raw["turns"] if "call" in t]
    assert len(dialogue.turns) == len(raw["turns"]) + 2 * len(calls)
    at = next(i for i, t in enumerate(dialogue.turns) if t.tool_calls)
    call, result, words = dialogue.turns[at : at + 3]
    assert call.speaker == "agent"
    assert not call.text
    assert call.tool_calls[0].name == calls[0]["call"]["method"]
    assert json.loads(call.tool_calls[0].arguments) == calls[0]["call"]["args"]
    assert result.tool_call_id == call.tool_calls[0].id
    assert json.loads(result.text)["results"] == calls[0]["results"]
    assert words.speaker == "agent"
    assert words.text == calls[0]["text"]


def _tool_format() -> DialogueFormat:
    return DialogueFormat(llm_tiny.tokenizer().with_tool_tokens(), 4, max_turn_tokens=48)


ROW = {"city": "San Jose", "name": "Bazille"}


def test_a_model_that_knows_tools_reads_calls_and_results() -> None:
    fmt = _tool_format()
    special = fmt.tokenizer.special
    call = ToolCall("c1", "FindRestaurants", '{"city": "San Jose"}')
    history = [
        Turn("user", "Find me a place to eat in San Jose."),
        Turn("agent", "", tool_calls=(call,)),
        Turn("tool", json.dumps({"n_results": 1, "results": [ROW]}), tool_call_id="c1"),
    ]
    call_turn, result_turn = fmt.encode_turns(history)[1:]
    assert call_turn[:2] == [special.agent, special.call]
    assert fmt.tokenizer.decode(call_turn) == "FindRestaurants city: San Jose"
    assert result_turn[0] == special.result
    assert fmt.tokenizer.decode(result_turn) == "1 results: name: Bazille"  # the city was asked
    prompt = fmt.prompt(history, 6, 256)
    assert special.result in prompt
    assert special.call in prompt
    # A malformed call (a remote model's, kept verbatim in the history) is read as its name.
    broken = Turn("agent", "", tool_calls=(ToolCall("c2", "FindRestaurants", "{city"),))
    assert fmt.tokenizer.decode(fmt.encode_turns([broken])[0]) == "FindRestaurants"


def test_a_model_without_tool_tokens_reads_only_the_words() -> None:
    fmt = llm_tiny.dialogue_format()
    call = ToolCall("c1", "FindRestaurants", "{}")
    history = [
        Turn("user", "Find me a place to eat."),
        Turn("agent", "Let me look.", tool_calls=(call,)),
        Turn("tool", '{"n_results": 0, "results": []}', tool_call_id="c1"),
    ]
    assert fmt.prompt(history, 6, 256) == fmt.prompt(
        [Turn("user", "Find me a place to eat."), Turn("agent", "Let me look.")], 6, 256
    )
    with pytest.raises(ValueError, match="no tool tokens"):
        fmt.encode_turns(history)


def test_a_call_that_does_not_parse_ends_the_reply_with_an_error() -> None:
    tokenizer = llm_tiny.tokenizer().with_tool_tokens()
    call = tokenizer.special.call
    assert call is not None
    clock = VirtualClock()
    words = tokenizer.encode("Let me check.")
    stats = ReplyStats(token_ids=[*words, call, *tokenizer.encode("not a call at all")])
    [piece] = last_pieces(WordEmitter(tokenizer, clock), stats, CallReader(call), clock)
    assert piece.text == "Let me check."
    assert not piece.tool_calls
    assert piece.error is not None
    assert "not 'key: value'" in piece.error
    assert stats.text == "Let me check."


# ---------------------------------------------------------------------------- result slots


def _agent_turns_after_results() -> list[tuple[str, dict[str, str]]]:
    """Every spoken agent turn of the sample that follows a result, with that result's row."""
    found = []
    for dialogue in read_dialogues(SAMPLE):
        for turn, rows in zip(dialogue.turns, latest_rows(dialogue.turns), strict=True):
            if turn.speaker == "agent" and turn.text and rows.words:
                found.append((turn.text, dict(rows.words)))
    return found


def test_slots_filled_from_the_result_give_back_the_corpus_reply() -> None:
    turns = _agent_turns_after_results()
    slotted = [with_slots(text, row) for text, row in turns]
    assert sum("[" in text for text in slotted) > len(turns) // 2  # most replies say a field
    tokenizer = llm_tiny.tokenizer()
    for (text, row), with_slot in zip(turns, slotted, strict=True):
        filler = SlotFiller(tokenizer, ReplyFacts(row))
        assert filler.decode(tokenizer.encode(with_slot)).lower() == text.lower()
        assert not filler.unfilled


def test_a_reply_is_emitted_with_its_slots_filled_a_whole_slot_at_a_time() -> None:
    tokenizer = llm_tiny.tokenizer()
    row = {"restaurant_name": "71 Saint Peter", "city": "San Jose"}
    ids = tokenizer.encode("How about [restaurant name] in [city]? It is [rating] stars.")
    filler = SlotFiller(tokenizer, ReplyFacts(row))
    full = filler.decode(ids)
    assert full == "How about 71 Saint Peter in San Jose? It is stars."
    assert filler.unfilled == {"[rating]"}  # a field the result lacks is dropped, and reported
    assert filler.ending(full) == ""  # not a confirmation: nothing to ask
    short = SlotFiller(tokenizer, ReplyFacts({**row, "street_address": "71 North San Pedro"}))
    assert short.decode(tokenizer.encode("[name] is at [address], [street].")) == (
        "71 Saint Peter is at 71 North San Pedro, 71 North San Pedro."
    )  # the one field whose name has the slot's words
    assert (
        SlotFiller(tokenizer, ReplyFacts({**row, "event_name": "x"})).decode(
            tokenizer.encode("[name]")
        )
        == ""
    )  # two fields have it: none is guessed
    emitter = WordEmitter(SlotFiller(tokenizer, ReplyFacts(row)), VirtualClock())
    pieces = [p.text for n in range(1, len(ids) + 1) if (p := emitter.update(ids[:n]))]
    assert pieces[0] == "How"
    assert not any("[" in piece or "]" in piece for piece in pieces)
    assert full.startswith("".join(pieces))


def test_a_date_or_time_nobody_said_is_said_as_the_caller_said_it() -> None:
    """A confirmation the model wrote with a time and date of its own is heard with the
    caller's, word by word, never half of one; one the caller said, or a result holds,
    stands."""
    tokenizer = llm_tiny.tokenizer()
    history = [Turn("user", "A table for next Tuesday at half past 7 in the evening, please.")]
    said = said_values(history)
    assert (said.dates, said.times) == (("2019-03-05",), ("19:30",))
    ids = tokenizer.encode("Please confirm: a table for 2 at 1:30 pm on March 1st. Right?")
    filler = SlotFiller(tokenizer, ReplyFacts({}, said))
    assert filler.decode(ids) == "Please confirm: a table for 2 at 7:30 pm on March 5th. Right?"
    assert filler.said_back == {"1:30 pm", "March 1st"}
    emitter = WordEmitter(SlotFiller(tokenizer, ReplyFacts({}, said)), VirtualClock())
    pieces = [p.text for n in range(1, len(ids) + 1) if (p := emitter.update(ids[:n]))]
    last = emitter.finish(ids)
    text = "".join(pieces) + (last.text if last else "")
    assert text == "Please confirm: a table for 2 at 7:30 pm on March 5th. Right?"
    assert not any("1:30" in piece or "1st" in piece for piece in pieces)
    right = "Please confirm: a table at 7:30 pm on March 5th, or 6 pm."
    kept = SlotFiller(tokenizer, ReplyFacts({}, said, frozenset({"18:00"})))
    assert kept.decode(tokenizer.encode(right)) == right
    assert not kept.said_back
    slots = tokenizer.encode("A table for [party size] at [time] on [date] at [restaurant name].")
    history.append(Turn("user", "Three of us."))
    caller_slots = SlotFiller(tokenizer, ReplyFacts({}, said_values(history)))
    assert caller_slots.decode(slots) == "A table for 3 at 7:30 pm on March 5th."
    assert caller_slots.unfilled == {"[restaurant name]"}  # no result: no name to say
    confirm = tokenizer.encode("Please confirm: a table at [restaurant name] in [city] at [time].")
    emitter = WordEmitter(
        SlotFiller(tokenizer, ReplyFacts({}, said_values(history))), VirtualClock()
    )
    pieces = [p.text for n in range(1, len(confirm) + 1) if (p := emitter.update(confirm[:n]))]
    last = emitter.finish(confirm)
    heard = "".join(pieces) + (last.text if last else "")
    assert heard == "Please confirm: a table at 7:30 pm. Which restaurant and city should it be?"
    assert heard.startswith("".join(pieces))  # nothing said was taken back: "at", "in" waited
    nothing_said = SlotFiller(tokenizer, ReplyFacts({}, said_values([])))
    assert nothing_said.decode(ids) == tokenizer.decode(ids)  # no time of theirs to say
    counted = tokenizer.encode("I found 10 restaurants for 2")
    emitter = WordEmitter(tokenizer, VirtualClock())
    pieces = [p.text for n in range(1, len(counted) + 1) if (p := emitter.update(counted[:n]))]
    last = emitter.finish(counted)
    assert "".join(pieces) + (last.text if last else "") == "I found 10 restaurants for 2"


def test_agent_turns_after_a_result_are_read_and_written_with_slots() -> None:
    fmt = DialogueFormat(llm_tiny.tokenizer().with_tool_tokens(), 4, max_turn_tokens=96)
    rows = [{"restaurant_name": "Bazille", "city": "San Jose", "time": "19:00"}]
    find = ToolCall("c1", "FindRestaurants", '{"city": "San Jose"}')
    book = ToolCall(
        "c2",
        "ReserveRestaurant",
        '{"restaurant_name": "Bazille", "city": "San Jose", "time": "7 pm"}',
    )
    history = [
        Turn("user", "Somewhere to eat in San Jose?"),
        Turn("agent", "", tool_calls=(find,)),
        Turn("tool", json.dumps({"n_results": 1, "results": rows}), tool_call_id="c1"),
        Turn("agent", "Bazille is nice."),
        Turn("user", "Book it for 7 pm."),
        Turn("agent", "", tool_calls=(book,)),
    ]
    encoded = [fmt.tokenizer.decode(turn) for turn in fmt.encode_turns(history)]
    assert encoded[0] == "Somewhere to eat in San Jose?"  # the caller's words stay
    assert encoded[3] == "[restaurant name] is nice."
    # The call refers to the result for the name, and copies the city the caller said.
    assert encoded[5] == (
        "ReserveRestaurant restaurant name: [restaurant name]; city: San Jose; time: 7 pm"
    )
    # The prompt's tail is read the same way, with the result that came before it.
    assert fmt.prompt(history, 3, 256)[:-1] == [
        t for turn in fmt.encode_turns(history)[3:] for t in turn
    ]
    assert fmt.reply_facts(history).row == rows[0]
    assert llm_tiny.dialogue_format().reply_facts(history) == ReplyFacts()  # no tools, no slots
    reader = CallReader(fmt.tokenizer.special.call)
    call_ids = fmt.encode_turns(history)[5][1:-1]
    [call] = reader.calls(call_ids, SlotFiller(fmt.tokenizer, ReplyFacts(rows[0])))
    assert json.loads(call.arguments) == json.loads(book.arguments)


# ----------------------------------------------------------------- a tiny model trained here


def _restaurant_dialogue(cuisine: str, city: str, name: str) -> dict[str, object]:
    return {
        "id": f"{cuisine}-{city}",
        "turns": [
            {"speaker": "user", "text": f"Find me an {cuisine} restaurant in {city}."},
            {
                "speaker": "agent",
                "text": f"{name} is a good one in {city}.",
                "call": {
                    "service": "Restaurants_1",
                    "method": "FindRestaurants",
                    "args": {"city": city, "cuisine": cuisine},
                },
                "results": [{"restaurant_name": name, "city": city, "cuisine": cuisine}],
                "n_results": 3,
            },
            {"speaker": "user", "text": "Thanks, that is all."},
            {"speaker": "agent", "text": "Have a good day."},
        ],
    }


RESTAURANTS = [("American", "San Jose", "Saint Peter"), ("Italian", "Palo Alto", "Bird Dog")]


def _tiny_options(corpus: Path, out: Path, **changes: object) -> TrainOptions:
    base = TrainOptions(
        objective="ar", corpora=(corpus,), validation=None, out_dir=out, epochs=300,
        warmup_steps=5, learning_rate=3e-3, vocab_size=300, block_size=4, max_turn_tokens=48,
        tokens_per_batch=1024, d_model=64, n_layers=2, n_heads=2, ffn_hidden=128, threads=1,
    )  # fmt: skip
    return TrainOptions(**{**base.__dict__, **changes})


@cache
def _trained(root: Path) -> LoadedModel:
    corpus = root / "restaurants.jsonl"
    corpus.write_text("".join(json.dumps(_restaurant_dialogue(*r)) + "\n" for r in RESTAURANTS))
    options = _tiny_options(corpus, root / "ar")
    shutil.rmtree(options.out_dir, ignore_errors=True)
    train(options)
    return load_model(options.out_dir / FINAL_MODEL)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> LoadedModel:
    return _trained(tmp_path_factory.mktemp("tools"))


async def _reply(
    generator: AutoregressiveTurnGenerator, history: list[Turn], tools: list[ToolSpec]
) -> tuple[str, tuple[ToolCall, ...]]:
    pieces = [piece async for piece in generator.stream(history, tools)]
    assert all(piece.error is None for piece in pieces)
    return "".join(p.text for p in pieces), pieces[-1].tool_calls if pieces else ()


FIND = ToolSpec("FindRestaurants", "Find a restaurant.", {"type": "object"})


def test_a_trained_model_calls_the_tool_and_answers_from_its_result(trained: LoadedModel) -> None:
    generator = AutoregressiveTurnGenerator(trained, GeneratorOptions(history_turns=6))
    for cuisine, city, name in RESTAURANTS:
        history = [Turn("user", f"Find me an {cuisine} restaurant in {city}.")]
        words, calls = asyncio.run(_reply(generator, history, [FIND]))
        assert words == ""
        [call] = calls
        assert call.name == "FindRestaurants"
        assert json.loads(call.arguments) == {"city": city, "cuisine": cuisine}
        rows = [{"restaurant_name": name, "city": city, "cuisine": cuisine}]
        history += [
            Turn("agent", "", tool_calls=calls),
            Turn("tool", json.dumps({"n_results": 3, "results": rows}), tool_call_id=call.id),
        ]
        words, calls = asyncio.run(_reply(generator, history, [FIND]))
        assert not calls
        assert words.startswith(name)
    # It writes a slot, not the name it learned: given another row, it says that row's name.
    assert "[restaurant name]" in trained.tokenizer.decode(generator.last_stats.token_ids)
    history = [Turn("user", "Find me an American restaurant in San Jose.")]
    _, calls = asyncio.run(_reply(generator, history, [FIND]))
    rows = [{"restaurant_name": "Bird Dog", "city": "San Jose", "cuisine": "American"}]
    history += [
        Turn("agent", "", tool_calls=calls),
        Turn("tool", json.dumps({"n_results": 3, "results": rows}), tool_call_id=calls[0].id),
    ]
    words, _ = asyncio.run(_reply(generator, history, [FIND]))
    assert words == "Bird Dog is a good one in San Jose."


def test_a_model_offered_no_tools_calls_none(trained: LoadedModel) -> None:
    generator = AutoregressiveTurnGenerator(trained, GeneratorOptions(history_turns=6))
    history = [Turn("user", "Find me an American restaurant in San Jose.")]
    _, calls = asyncio.run(_reply(generator, history, []))
    assert calls == ()
    assert trained.tokenizer.special.call not in generator.last_stats.token_ids


def test_a_checkpoint_grows_two_tokens_for_a_corpus_with_calls(
    trained: LoadedModel, tmp_path: Path
) -> None:
    plain = tmp_path / "plain.jsonl"
    plain.write_text(
        "".join(
            json.dumps({"id": str(i), "turns": [{"speaker": "user", "text": "Hi there."},
                        {"speaker": "agent", "text": "Hello, how can I help?"}]}) + "\n"
            for i in range(4)
        )
    )  # fmt: skip
    words_only = _tiny_options(plain, tmp_path / "words", epochs=1)
    train(words_only)
    before = load_model(words_only.out_dir / FINAL_MODEL)
    assert not before.tokenizer.knows_tools
    grown = _tiny_options(
        SAMPLE, tmp_path / "grown", epochs=0.01, init=words_only.out_dir / FINAL_MODEL,
        learning_rate=0.0,
    )  # fmt: skip
    train(grown)
    after = load_model(grown.out_dir / FINAL_MODEL)
    assert after.tokenizer.knows_tools
    assert after.tokenizer.vocab_size == before.tokenizer.vocab_size + 2
    old, new = before.model.embedding.weight, after.model.embedding.weight
    torch.testing.assert_close(new[: len(old)], old, rtol=0, atol=0)  # lr 0: nothing moved
    torch.testing.assert_close(new[len(old) :], old.float().mean(0).expand(2, -1).to(old.dtype))


# ---------------------------------------------------------------------- the offline services


def said(words: str) -> ToolContext:
    """A call's context in which the caller has said ``words``."""
    return ToolContext("call-1", 0, Keypad(), (Turn("user", words),), lambda why: None)


def _sample_catalogue(tmp_path: Path) -> SGDCatalogue:
    for split in ("train", "dev"):
        schemas = (DATA / "schemas_sample.json").read_text() if split == "train" else "[]"
        (tmp_path / f"schemas_{split}.json").write_text(schemas)
        tools = SAMPLE.read_text() if split == "train" else ""
        (tmp_path / f"sgd_tools_{split}.jsonl").write_text(tools)
    out = tmp_path / "catalogue.json.gz"
    build_catalogue(tmp_path, ["Restaurants_1"], out)
    return SGDCatalogue.read(out)


def test_a_search_returns_the_corpus_rows_that_match_its_arguments(tmp_path: Path) -> None:
    catalogue = _sample_catalogue(tmp_path)
    expected = [
        row
        for line in SAMPLE.read_text().splitlines()
        for turn in json.loads(line)["turns"]
        if turn.get("call", {}).get("method") == "FindRestaurants"
        and turn["call"]["args"]["city"] == "San Jose"
        for row in turn["results"]
    ]
    tools = {t.name: t for t in sgd_service_tools(["Restaurants_1"], catalogue)}
    find = tools["FindRestaurants"]
    arguments = find.validate('{"city": "san  jose", "cuisine": "american"}')
    asked = said("American food in San Jose, please.")
    found = json.loads(asyncio.run(find.call(arguments, asked)))
    unique = {json.dumps(r, sort_keys=True): r for r in expected if r["cuisine"] == "American"}
    assert found["n_results"] == len(unique)
    assert found["results"] == list(unique.values())[:5]
    assert all(r["city"] == "San Jose" for r in found["results"])


def test_a_booking_confirms_with_the_details_of_what_it_names(tmp_path: Path) -> None:
    catalogue = _sample_catalogue(tmp_path)
    reserve = {t.name: t for t in sgd_service_tools(["Restaurants_1"], catalogue)}[
        "ReserveRestaurant"
    ]
    assert not reserve.read_only
    arguments = reserve.validate(
        '{"restaurant_name": "71 Saint Peter", "city": "San Jose", "time": "19:00"}'
    )
    asked = said("A table at 71 Saint Peter in San Jose at 7 in the evening.")
    [row] = json.loads(asyncio.run(reserve.call(arguments, asked)))["results"]
    assert row["restaurant_name"] == "71 Saint Peter"
    assert row["time"] == "19:00"
    assert row["street_address"] == "71 North San Pedro Street"  # from the corpus's rows
    assert row["party_size"] == "2"  # the schema's default
    # A name the caller said that the catalogue lacks: no rows, as the corpus's services did.
    unknown = reserve.validate('{"restaurant_name": "Bi", "city": "San Jose", "time": "19:00"}')
    refused = json.loads(asyncio.run(reserve.call(unknown, said("Book Bi in San Jose at 7 pm."))))
    assert refused == {"n_results": 0, "results": []}
    # One nobody said, or none at all: the caller is asked for it, nothing is run.
    for name in ("Bi", " "):
        made_up = reserve.validate(
            json.dumps({"restaurant_name": name, "city": "San Jose", "time": "19:00"})
        )
        with pytest.raises(AskTheCaller, match="Which restaurant"):
            asyncio.run(reserve.call(made_up, said("A table in San Jose at 7 pm, please.")))


def test_the_configuration_names_the_services_offered() -> None:
    assert set(packaged_catalogue().services) >= {"Restaurants_1", "Hotels_3", "Events_2"}
    assert offered_tools([], ToolsConfig()) == [BUILTIN_TOOLS["end_call"]]  # none by default
    names = [t.name for t in offered_tools([], ToolsConfig(services=["Restaurants_1"]))]
    assert {"FindRestaurants", "ReserveRestaurant"} <= set(names)
    with pytest.raises(ToolSelectionError, match=r"tools\.services: no service 'Pizza_9'"):
        offered_tools([], ToolsConfig(services=["Pizza_9"]))


# ---------------------------------------------------------------------- what eval-lm measures


def test_an_invented_entity_is_caught_and_one_from_the_results_is_not() -> None:
    rows = [
        {"restaurant_name": "Bird Dog", "city": "Palo Alto", "street_address": "420 Ramona Street"}
    ]
    elsewhere = [{"hotel_name": "1 Hotel Brooklyn Bridge", "city": "New York"}]
    result = Turn("tool", json.dumps({"n_results": 1, "results": rows}), tool_call_id="c1")
    lexicon = entity_lexicon(
        [result, Turn("tool", json.dumps({"results": elsewhere}), tool_call_id="c2")]
    )
    assert {"bird dog", "420 ramona street", "1 hotel brooklyn bridge"} <= lexicon
    history = [Turn("user", "A table in Palo Alto, please."), result]
    assert hallucinated_entities("Bird Dog at 420 Ramona Street is free.", history, lexicon) == []
    invented = hallucinated_entities("How about 1 Hotel Brooklyn Bridge?", history, lexicon)
    assert invented == ["1 hotel brooklyn bridge"]
    # Said by the caller first: not invented.
    assert (
        hallucinated_entities(
            "1 Hotel Brooklyn Bridge it is.",
            [Turn("user", "Is 1 Hotel Brooklyn Bridge free?")],
            lexicon,
        )
        == []
    )


def test_an_invented_number_is_caught() -> None:
    fare = Turn("tool", json.dumps({"results": [{"ride_fare": "11.08"}]}), tool_call_id="c1")
    history = [Turn("user", "A cab to 1546 Maurice Lane for 2, please."), fare]
    assert (
        hallucinated_entities("It costs $11.08 to 1546 Maurice Lane.", history, frozenset()) == []
    )
    invented = hallucinated_entities("It costs $11.02 to 3300 Maurice Lane.", history, frozenset())
    assert invented == ["11.02", "3300"]


def test_a_call_matches_only_with_the_same_method_and_every_argument() -> None:
    wanted = ToolCall("a", "FindRestaurants", '{"city": "San Jose", "cuisine": "American"}')
    assert same_call(
        ToolCall("b", "FindRestaurants", '{"cuisine": "american", "city": "San  Jose"}'), wanted
    )
    assert not same_call(ToolCall("b", "FindRestaurants", '{"city": "San Jose"}'), wanted)
    assert not same_call(ToolCall("b", "FindHotels", wanted.arguments), wanted)
    assert not same_call(ToolCall("b", "FindRestaurants", "not json"), wanted)


def test_the_lane_corpus_evaluates_on_what_training_never_saw(tmp_path: Path) -> None:
    counts = build_lane_corpus(SAMPLE, tmp_path / "train.jsonl", tmp_path / "test.jsonl", 400, 100)
    assert sum(v for k, v in counts.items() if k.startswith("train_")) == 400
    train = read_dialogues(tmp_path / "train.jsonl")
    test = read_dialogues(tmp_path / "test.jsonl")
    for dialogues in (train, test):
        assert all(lane_kind(d.turns[-1].text) is not None for d in dialogues)
    training_asks = {d.turns[-2].text for d in train}
    declines = [d.turns[-2].text for d in test if lane_kind(d.turns[-1].text) == "decline"]
    assert declines
    assert not any(task in ask for ask in declines for task in TRAINING_TASKS)
    assert not training_asks & set(HELD_OUT_NOISE)
    assert any(len(d.turns) > 2 for d in train)  # some follow the start of a real dialogue
    assert behaves(DECLINE, "decline")
    assert not behaves(REPEAT, "decline")


def test_eval_lm_reports_tool_use_and_lane_behaviour(trained: LoadedModel, tmp_path: Path) -> None:
    corpus = tmp_path / "restaurants.jsonl"
    corpus.write_text("".join(json.dumps(_restaurant_dialogue(*r)) + "\n" for r in RESTAURANTS))
    dialogues = read_dialogues(corpus)
    lexicon = entity_lexicon(t for d in dialogues for t in d.turns)
    report = evaluate_backend(
        "ar", "tiny", trained, GeneratorOptions(history_turns=6), dialogues, lexicon=lexicon
    )
    assert report.tools["call_turns"] == 2
    assert report.tools["call_exact_match"] == 1.0  # it memorised both calls
    assert report.tools["replies_with_hallucinated_entities"] == 0.0
    assert report.lane == {}  # no in-lane turns in this corpus
    assert set(report.to_dict()) >= {"tools", "call_misses", "hallucinations", "lane", "bleu"}


def test_eval_lm_measures_a_model_without_tools_on_the_tool_corpus() -> None:
    """The shipped models before tools: their spoken replies are scored, the calls skipped."""
    loaded = LoadedModel(llm_tiny.model("causal"), llm_tiny.dialogue_format(), {})
    dialogues = read_dialogues(SAMPLE)
    report = evaluate_backend("ar", "tiny", loaded, GeneratorOptions(), dialogues)
    assert report.tools["call_turns"] == 0
    spoken = sum(t.speaker == "agent" and not t.tool_calls for d in dialogues for t in d.turns)
    assert report.replies == report.tools["spoken_turns"] == spoken
