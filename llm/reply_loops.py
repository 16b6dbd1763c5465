"""The two loops a local decoder writes a reply with, each written once: token by token
(:func:`greedy_reply`) and block by block (:func:`diffused_reply`) — with early emission of
the committed words, the deadline rule, where a reply ends, and what :class:`ReplyStats`
records.

Six decoders run them: the embedded models (``autoregressive.py``, ``block_diffusion.py`` and
its graphed twin ``graphed_decoder.py``), the open-weight checkpoints
(``open_weights/decoder.py``, ``open_weights/graphed.py``) and SmolLM2's adapters
(``adapted_decoding.py``). They differ only in what one step is — the next token of a greedy
forward, or a :class:`Denoiser`'s step over a block — so a change to how a reply is emitted,
timed or ended is made here, once, and holds for every model.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Protocol

import torch

from cadence.core.clock import Clock
from cadence.kernels import CommitDecision
from cadence.llm.commit_rule import deadline_threshold
from cadence.llm.conversation_cache import ConversationCache
from cadence.llm.decoding import DecodingOptions, ReplyStats
from cadence.llm.emission import CallReader, ReplyPiece, WordEmitter, last_pieces, spoken_part


def greedy_reply(
    next_token: Callable[[list[int]], int],
    pending: list[int],
    *,
    options: DecodingOptions,
    stop: threading.Event | None = None,
    clock: Clock,
    stats: ReplyStats,
    emitter: WordEmitter,
    ends: tuple[int, ...],
    call: int | None = None,
    calls: CallReader | None = None,
) -> Iterator[ReplyPiece]:
    """A reply one token at a time: ``next_token(pending)`` runs ``pending`` (the prompt's
    uncached tail, then the last token) through the model and picks the next token, until an
    end token or ``max_reply_tokens``. The words before a ``call`` token go out as they
    complete; the calls after it are read at the end by ``calls``, and each step of writing
    them yields an empty piece — the reply is moving, though it has nothing to say yet, which
    is what the turn engine's ``faults.llm_timeout_ms`` waits for (a booking call is 50 tokens
    and more). Once ``stop`` is set the reply ends before its next step, with nothing more
    (see :func:`stopped`)."""
    reply: list[int] = []
    while len(reply) < options.max_reply_tokens:
        if stopped(stop, stats):
            return
        token = next_token(pending)
        stats.steps_per_block.append(1)
        if token in ends:
            break
        reply.append(token)
        pending = [token]
        piece = emitter.update(spoken_part(reply, call))
        if piece is not None:
            stats.first_piece_ms = stats.first_piece_ms or piece.at_ms
            yield piece
        elif call is not None and call in reply:
            yield ReplyPiece("", clock.now_ms())  # writing a call: progress, no words
    stats.token_ids = reply
    yield from last_pieces(emitter, stats, calls, clock)


class Denoiser(Protocol):
    """One model's denoising steps, as :func:`diffused_reply` drives them."""

    def begin_block(self, index: int, pending: list[int], start: int) -> None:
        """Block ``index`` begins: ``pending`` (the prompt's uncached part, or the block just
        finished) goes into the cache with its first step; its first ``start`` positions are
        given (the prompt's leftover tokens), the rest masked."""

    def commits(
        self,
        block: list[int],
        masked: list[bool],
        window: slice,
        threshold: Callable[[], float],
    ) -> list[tuple[int, int]]:
        """One step over ``block``: the ``(position, token)`` pairs it commits, all inside
        ``window`` (the positions before it are committed). ``threshold`` gives τ when
        read."""


def diffused_reply(
    denoiser: Denoiser,
    pending: list[int],
    given: list[int],
    *,
    mask: int,
    size: int,
    sub_block: int,
    options: DecodingOptions,
    stop: threading.Event | None = None,
    clock: Clock,
    stats: ReplyStats,
    emitter: WordEmitter,
    ends: tuple[int, ...],
    call: int | None = None,
    calls: CallReader | None = None,
) -> Iterator[ReplyPiece]:
    """A reply block by block: each block of ``size`` starts masked (the first holds the
    ``given`` tokens) and is denoised step by step, sub-block by sub-block left to right;
    after every step the contiguous committed prefix goes out at word boundaries, and the
    reply ends at the first end token with nothing masked before it, or at
    ``max_reply_tokens``. A block running past its budget lowers τ
    (:func:`block_threshold`). Once ``stop`` is set the reply ends before its next step, with
    nothing more (see :func:`stopped`)."""
    limit = options.max_reply_tokens
    reply: list[int] = []
    finished = False
    for index in range(-(-(len(given) + limit + 1) // size)):
        start = len(given) if index == 0 else 0
        block = (given if index == 0 else []) + [mask] * (size - start)
        masked = [position >= start for position in range(size)]
        budget = options.first_emit_budget_ms if index == 0 else options.block_budget_ms
        block_start = stats.start_ms if index == 0 else clock.now_ms()
        threshold = block_threshold(options, clock, block_start, budget)
        denoiser.begin_block(index, pending, start)
        steps = 0
        for window in (slice(w, w + sub_block) for w in range(0, size, sub_block)):
            while not finished and any(masked[window]):
                if stopped(stop, stats):
                    return
                for position, token in denoiser.commits(block, masked, window, threshold):
                    block[position], masked[position] = token, False
                steps += 1
                piece, finished = emit_committed(
                    emitter,
                    stats,
                    reply + block[start:],
                    [False] * len(reply) + masked[start:],
                    ends,
                    limit,
                    call,
                )
                if piece is not None:
                    yield piece
        stats.steps_per_block.append(steps)
        reply += block[start:]
        pending = block
        if finished:
            break
    stats.token_ids = committed_prefix(reply, [False] * len(reply), ends)[0][:limit]
    yield from last_pieces(emitter, stats, calls, clock)


def stopped(stop: threading.Event | None, stats: ReplyStats) -> bool:
    """Whether the reply was stopped (a barge-in, ``llm_timeout_ms``, a hang-up: its reader
    was cancelled). Checked before every step, so a decode in a worker thread ends within one
    step of it and the generator's lock is free right after; the cache holds only what
    finished steps put there, which the next reply reuses or forgets like any other."""
    if stop is None or not stop.is_set():
        return False
    stats.stopped = True
    stats.end_ms = stats.end_ms or stats.start_ms
    return True


def split_prompt(
    prompt: list[int], size: int, cache: ConversationCache, *, shifted: bool
) -> tuple[list[int], list[int]]:
    """``prompt`` as a model whose blocks count from position 0 decodes it: what the first
    step carries into the cache (its whole blocks not cached yet, which ``cache`` now counts
    as cached) and the tokens left over, which start the first decode block. A *shifted*
    model predicts a block's first token from the position before it, so a prompt of whole
    blocks keeps its last block out of the cache, for the first step to carry."""
    whole = len(prompt) - len(prompt) % size
    cacheable = whole - size if shifted and whole == len(prompt) else whole
    return cache.reuse(prompt[:cacheable]) + prompt[cacheable:whole], prompt[whole:]


def window_commits(decision: CommitDecision, window: slice) -> list[tuple[int, int]]:
    """A commit decision over ``window``'s positions (indexed from its start) as the
    ``(position, token)`` pairs of the block it commits."""
    predicted = decision.prediction.tolist()
    return [
        (window.start + position, predicted[position])
        for position in decision.commit.nonzero().flatten().tolist()
    ]


def shifted_rows(
    logits: torch.Tensor,
    block_length: int,
    window: slice,
    before: torch.Tensor | None,
) -> torch.Tensor:
    """The logits rows that predict ``window``'s positions in a model trained *shifted*
    (position *j* from the output at *j − 1*): the block's own rows one to the left, and for
    its position 0 the row before the block (``before``, kept from the forward that carried
    it) — or, with none, any row, as position 0 is then a given prompt token."""
    own = logits[-block_length:]
    rows = own[max(window.start - 1, 0) : window.stop - 1]
    if window.start == 0:
        rows = torch.cat(((own[0] if before is None else before)[None], rows))
    return rows


def block_threshold(
    options: DecodingOptions, clock: Clock, block_start: float, budget_ms: float
) -> Callable[[], float]:
    """τ for a block that started at ``block_start`` with ``budget_ms``, read when called (after
    the step's forward, so a late step commits more)."""
    return lambda: deadline_threshold(
        options.confidence_threshold, clock.now_ms() - block_start, budget_ms
    )


def emit_committed(
    emitter: WordEmitter,
    stats: ReplyStats,
    tokens: list[int],
    masked: list[bool],
    ends: tuple[int, ...],
    limit: int,
    call: int | None = None,
) -> tuple[ReplyPiece | None, bool]:
    """After a step: the piece with the new complete words of the reply's committed prefix
    (``None`` if there are none) — the words before a ``call``, if the reply makes one — and
    whether the reply is over (it ended, or reached ``limit`` tokens)."""
    text, finished = committed_prefix(tokens, masked, ends)
    text = text[:limit]
    piece = emitter.update(spoken_part(text, call))
    if piece is not None:
        stats.first_piece_ms = stats.first_piece_ms or piece.at_ms
    return piece, finished or len(text) == limit


def committed_prefix(
    tokens: list[int], masked: list[bool], ends: tuple[int, ...]
) -> tuple[list[int], bool]:
    """The text tokens before the first masked position or end of turn, and whether the
    reply ended there (an end of turn or padding with nothing masked to its left)."""
    prefix: list[int] = []
    for token, is_masked in zip(tokens, masked, strict=True):
        if is_masked:
            return prefix, False
        if token in ends:
            return prefix, True
        prefix.append(token)
    return prefix, False


class EagerDenoising:
    """:class:`Denoiser` for a decoder whose step is an eager forward and a commit decision
    (:meth:`decide`): a block's first step also carries ``pending`` into the cache, and the
    row before the block, once a forward has computed it, is kept for the block's steps."""

    device: torch.device
    _carried: list[int]
    _before: torch.Tensor | None

    def decide(
        self,
        pending: list[int],
        block: list[int],
        masked: torch.Tensor,
        window: slice,
        before: torch.Tensor | None,
        threshold: Callable[[], float],
    ) -> tuple[CommitDecision, torch.Tensor | None]:
        """One step: the commit decision for ``window``'s positions, and ``before``."""
        raise NotImplementedError

    def begin_block(self, index: int, pending: list[int], start: int) -> None:
        self._carried, self._before = pending, None

    def commits(
        self,
        block: list[int],
        masked: list[bool],
        window: slice,
        threshold: Callable[[], float],
    ) -> list[tuple[int, int]]:
        pending, self._carried = self._carried, []
        flags = torch.tensor(masked, dtype=torch.bool, device=self.device)
        decision, self._before = self.decide(pending, block, flags, window, self._before, threshold)
        return window_commits(decision, window)
