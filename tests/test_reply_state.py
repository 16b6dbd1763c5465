"""A reply's lifecycle is one state moved along listed edges: each path a reply can take ends
where it should, and a move off the edges raises instead of leaving a reply half one thing and
half another."""

from __future__ import annotations

import pytest

from cadence.pipeline.stages.turn.reply import Reply, ReplyState


def _reply() -> Reply:
    return Reply(0, "Is Ann booked?", transcript_at_ms=100.0, started_ms=100.0)


def test_a_reply_generated_before_the_commit_is_spoken_at_the_commit_then_heard() -> None:
    reply = _reply()
    reply.generation_ended()
    assert (reply.state, reply.committed, reply.generated) == (ReplyState.PREPARED, False, True)
    reply.commit(250.0)
    assert (reply.state, reply.committed_at_ms) == (ReplyState.SPOKEN, 250.0)
    assert reply.committed_event.is_set()
    reply.heard_to_end()
    assert (reply.state, reply.committed) == (ReplyState.HEARD, True)


def test_a_reply_committed_while_generated_speaks_until_its_last_word() -> None:
    reply = _reply()
    reply.commit(250.0)
    assert (reply.state, reply.generated) == (ReplyState.SPEAKING, False)
    reply.generation_ended()
    assert reply.state is ReplyState.SPOKEN


def test_dropped_before_the_commit_and_withdrawn_after_it() -> None:
    before, after = _reply(), _reply()
    before.drop()
    after.commit(250.0)
    after.drop()
    assert (before.state, before.committed) == (ReplyState.DROPPED, False)
    assert (after.state, after.committed) == (ReplyState.WITHDRAWN, True)


def test_a_reply_cut_while_generated_stays_cut_when_its_generation_ends() -> None:
    reply = _reply()
    reply.commit(250.0)
    reply.interrupt()
    reply.generation_ended()
    assert (reply.state, reply.committed, reply.generated) == (
        ReplyState.INTERRUPTED,
        True,
        False,
    )


@pytest.mark.parametrize(
    ("path", "illegal"),
    [
        ([], "interrupt"),  # nothing of an uncommitted reply is being heard
        ([], "heard_to_end"),
        (["commit"], "heard_to_end"),  # its last words are still to come
        (["commit"], "commit"),
        (["drop"], "commit"),  # a dropped reply is never committed
        (["commit", "interrupt"], "drop"),
    ],
)
def test_a_move_off_the_edges_raises_and_leaves_the_state(path: list[str], illegal: str) -> None:
    reply = _reply()
    for move in path:
        reply.commit(250.0) if move == "commit" else getattr(reply, move)()
    state = reply.state
    with pytest.raises(RuntimeError, match=f"no move from {state.name}"):
        reply.commit(300.0) if illegal == "commit" else getattr(reply, illegal)()
    assert reply.state is state
