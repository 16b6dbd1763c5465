"""``cadence build-lane-corpus``: training material for staying in lane — greeting, saying
what the agent can do, declining what no service does, and asking again when the words make
no sense.

The SGD dialogues never show any of this (every caller there wants something a service
does), so it is written here, and kept deliberately plain: the agent's answers are four fixed
sentences (``GREETING``, ``CAPABILITIES``, ``DECLINE``, ``REPEAT``), which a small model
learns as units, and the variety is on the caller's side:

* **greetings** and **what can you do** questions, from hand-written phrasings;
* **out-of-scope requests**: hand-written tasks no SGD service does (jokes, trivia, homework,
  tech support, medical, legal or financial advice…) in hand-written phrasings; the topics
  are split in two, and the evaluation file holds only topics that training never saw;
* **noise**: what Whisper writes on line noise and music ("Thanks for watching!",
  "Subtitles by the Amara.org community", "you you you") and word salads drawn from the
  corpus's own caller words in random order.

Each example is a short dialogue of its own, or follows the first turns of a real
``sgd_tools_train`` dialogue (cut after an agent turn), so that the agent also declines and
asks again in the middle of a call. Seeded: the same command writes the same files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CAPABILITIES = (
    "I can help you find and book restaurants, hotels, flights, buses, rental cars, events "
    "and more."
)
GREETING = f"Hello! {CAPABILITIES} What can I do for you?"
DECLINE = f"Sorry, I can't help with that. {CAPABILITIES}"
REPEAT = "Sorry, I didn't catch that. Could you say it again?"

GREETINGS = (
    "Hi.", "Hello.", "Hey there.", "Good morning.", "Good afternoon.", "Good evening.",
    "Hi, is anyone there?", "Hello? Can you hear me?", "Hey.", "Hi there, how are you?",
    "Hello, who am I speaking with?", "Yeah, hi.", "Um, hello?", "Hi, good morning.",
)  # fmt: skip
ASK_CAPABILITIES = (
    "What can you do?", "What can you help me with?", "What do you do?",
    "What kind of things can you help with?", "What are you able to do for me?",
    "How can you help me?", "What services do you offer?", "What can I ask you?",
    "Hi, what can you do for me?", "So what do you help with?", "What are my options here?",
)  # fmt: skip
TRAINING_TASKS = (
    "tell me a joke", "tell me the capital of France", "help me with my math homework",
    "explain quantum physics", "reset my email password", "fix my wifi",
    "tell me what to take for a headache", "give me some stock tips", "write me a poem",
    "translate this sentence into Spanish", "tell me who won the game last night",
    "give me a recipe for lasagna", "sing me a song", "tell me about the history of Rome",
    "tell me how tall Mount Everest is", "give me some dating advice",
    "help me with my lease agreement", "tell me why my car is making a noise",
    "tell me what to feed my puppy", "cancel my phone plan", "check my email",
    "help me file my taxes", "tell me your opinion on the election",
    "tell me how to lose weight", "explain how a blockchain works",
    "help me write a speech for a wedding", "tell me the meaning of life",
    "recommend a good video game", "tell me how many ounces are in a cup",
    "help me learn French", "tell me a bedtime story", "update my phone software",
)  # fmt: skip
HELD_OUT_TASKS = (
    "recommend a good book", "solve this equation for me", "tell me the news",
    "teach me how to bake bread", "help me write a cover letter",
    "tell me the population of Canada", "tell me if this cough is serious",
    "set up my printer", "teach me to play the guitar", "tell me a fun fact",
    "help me pick a name for my cat", "explain how vaccines work",
    "tell me how to unclog a drain", "write a story about a dragon",
    "tell me who painted the Mona Lisa", "help me with my resume",
)  # fmt: skip
PHRASINGS = (
    "Can you {task}?", "Could you please {task}?", "I need you to {task}.",
    "Please {task}.", "Hey, can you {task}?", "Would you {task} for me?",
    "I was wondering if you could {task}.", "Um, can you {task}?", "Okay, {task}.",
    "Actually, can you {task} instead?",
)  # fmt: skip
TRAINING_NOISE = (
    "Thanks for watching!", "Please subscribe to my channel.", "you you you", "the the the",
    "...", "♪", "[MUSIC]", "Hmm hmm hmm.", "So so so so.", "Oh, oh, oh.",
)  # fmt: skip
HELD_OUT_NOISE = (
    "Thank you for watching.", "Subtitles by the Amara.org community", "I I I",
    "Bye bye bye bye.", "Transcription by ESO. Translation by", "Mm-hmm. Mm-hmm. Mm-hmm.",
)  # fmt: skip
"""What Whisper writes on line noise and music; the held-out ones only in the evaluation."""

KINDS = {GREETING: "greeting", CAPABILITIES: "capabilities", DECLINE: "decline", REPEAT: "repeat"}
"""The lane's kinds of answer, by the fixed sentence that is the right reply."""


def lane_kind(reference: str) -> str | None:
    """Which in-lane behaviour a reference reply is (``None``: an ordinary reply)."""
    return KINDS.get(reference)


def behaves(reply: str, kind: str) -> bool:
    """Whether a generated reply does what ``kind`` asks: greets, says what it can do,
    declines, or asks to hear it again."""
    text = reply.lower()
    match kind:
        case "greeting":
            return text.startswith(("hello", "hi")) and "help" in text
        case "capabilities":
            return "i can help you" in text
        case "decline":
            return "can't help with that" in text or "cannot help with that" in text
        case _:
            return "didn't catch that" in text or "say it again" in text


def build_lane_corpus(
    tool_corpus: Path,
    train_out: Path,
    test_out: Path,
    examples: int = 3000,
    test_examples: int = 200,
    seed: int = 0,
) -> dict[str, int]:
    """Write the training and the evaluation dialogues; returns how many of each kind."""
    rng = random.Random(seed)
    records = [json.loads(line) for line in tool_corpus.read_text().splitlines() if line]
    words = [w for r in records[:2000] for t in r["turns"] if t["speaker"] == "user"
             for w in t["text"].split()]  # fmt: skip
    counts: dict[str, int] = {}
    train = [_example(rng, records, words, TRAINING_TASKS, counts) for _ in range(examples)]
    test_counts: dict[str, int] = {}
    test_rng = random.Random(seed + 1)
    test = [
        _example(test_rng, records, words, HELD_OUT_TASKS, test_counts, held_out=True)
        for _ in range(test_examples)
    ]
    for path, dialogues in ((train_out, train), (test_out, test)):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(d) + "\n" for d in dialogues), encoding="utf-8")
    return {**{f"train_{k}": v for k, v in counts.items()},
            **{f"test_{k}": v for k, v in test_counts.items()}}  # fmt: skip


def _example(
    rng: random.Random,
    records: Sequence[dict[str, Any]],
    words: Sequence[str],
    tasks: Sequence[str],
    counts: dict[str, int],
    held_out: bool = False,
) -> dict[str, Any]:
    kind = rng.choices(["greeting", "capabilities", "decline", "repeat"], [2, 2, 4, 3])[0]
    if kind == "greeting":
        user, agent = rng.choice(GREETINGS), GREETING
    elif kind == "capabilities":
        user, agent = rng.choice(ASK_CAPABILITIES), CAPABILITIES
    elif kind == "decline":
        user, agent = rng.choice(PHRASINGS).format(task=rng.choice(tasks)), DECLINE
    else:
        salad = " ".join(rng.sample(list(words), rng.randint(2, 6))).lower()
        noise = rng.choice(HELD_OUT_NOISE if held_out else TRAINING_NOISE)
        user, agent = (noise if rng.random() < 0.5 else salad), REPEAT
    counts[kind] = counts.get(kind, 0) + 1
    before: list[dict[str, Any]] = []
    if kind != "greeting" and rng.random() < 0.5:
        record = rng.choice(records)
        agent_turns = [i for i, t in enumerate(record["turns"]) if t["speaker"] == "agent"]
        if agent_turns:
            before = record["turns"][: rng.choice(agent_turns) + 1]
    turns = [*before, {"speaker": "user", "text": user}, {"speaker": "agent", "text": agent}]
    return {"id": f"lane_{kind}_{rng.getrandbits(32):08x}", "turns": turns}
