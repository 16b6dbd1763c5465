"""``History``: the conversation as the model will read it — the caller's turns, and the
agent's cut to what the caller heard.

Why a room of its own: the history is written at five moments — a turn opened at its commit,
the reply's words added when it has them all, a withdrawn turn taken out, a barge-in cutting
the reply to the words heard, a tool's late result put where the call's cancellation was — and
it is the one thing of the turn stage that outlives a reply. Every write goes through here,
keyed on where the reply's user turn stands (``Reply.history_at``), so what the model reads
next is true to what was said and heard. The reply's words may be complete before the commit
(generated ahead of it) or after (still generating when committed): both events call
``add_reply_once_ready``, and the rule of which one adds them is read there alone.
"""

from __future__ import annotations

from cadence.llm import Turn
from cadence.pipeline.stages.turn.reply import Reply


class History:
    def __init__(self) -> None:
        self.turns: list[Turn] = []
        """Completed turns, the agent's cut to what the caller heard."""

    def agent_text(self) -> str | None:
        """What the agent said last, if the history ends with it: context for the end-of-turn
        detector ("two" answers "How many people?")."""
        if self.turns and self.turns[-1].speaker == "agent":
            return self.turns[-1].text
        return None

    def prompt(self, user_text: str) -> list[Turn]:
        """What the generator is asked to answer."""
        return [*self.turns, Turn("user", user_text)]

    def open_turn(self, reply: Reply) -> None:
        """``reply``'s turn was committed: the caller's words go in."""
        reply.history_at = len(self.turns)
        self.turns.append(Turn("user", reply.user_text))

    def add_reply_once_ready(self, reply: Reply) -> None:
        """Called at ``reply``'s commit (after ``open_turn``) and at the end of its
        generation, whichever order they come in: its words (and its calls' results) go in
        at the second — once it is both committed and generated, which the first of the two
        never sees, so exactly once. A reply that ended otherwise first (cut, withdrawn) is
        not generated: what the history says of it is ``cut_to_heard``'s or nothing."""
        if reply.in_history and reply.committed and reply.generated:
            self.turns.extend(reply.history_turns())

    def withdraw(self, reply: Reply) -> None:
        """The caller's turn goes on: its committed user turn, and all after it, go."""
        if reply.history_at is not None:
            del self.turns[reply.history_at :]

    def cut_to_heard(self, reply: Reply, heard: str) -> None:
        """A barge-in: the reply is what was heard of it (its calls and their results kept)."""
        if reply.history_at is not None:
            del self.turns[reply.history_at + 1 :]
            self.turns.extend(reply.history_turns(heard))

    def late_result(self, reply: Reply, call_id: str, content: str) -> None:
        """A call left running at a barge-in finished: its result replaces what the history
        said of it."""
        start = len(self.turns) if reply.history_at is None else reply.history_at
        for index in range(start, len(self.turns)):
            if self.turns[index].tool_call_id == call_id:
                self.turns[index] = Turn("tool", content, tool_call_id=call_id)
                break
