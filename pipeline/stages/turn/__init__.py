"""The turn engine: decides when the caller's turn is over, has the generator answer it, and
keeps the conversation's history true to what was said and heard.

Its rooms, one job each (``TurnStage`` in ``stage.py`` routes the frames between them, and
makes the decisions that start and end a reply):

* ``commit.py`` — when to commit the caller's turn (the end-of-turn wait), from where the
  caller's speech ended;
* ``interruption.py`` — what a sound during the reply means (new turn, the turn going on,
  backchannel, barge-in): it judges and reports, and the stage pauses, resumes or barges in;
* ``generation.py`` and ``tool_rounds.py`` — the reply's rounds, streamed and yielding the
  CPU, and the tools it calls (fillers, late results);
* ``reply.py`` — one handle per reply, its lifecycle one ``ReplyState``;
* ``speaker.py`` — the verbs that hand a reply's words to TTS and end it;
* ``history.py`` and ``hang_up.py`` — what of the reply was heard, in the history (its words
  added once, at its commit or at its end, whichever is second), and the hang-up after a
  goodbye.

Each piece of state has one owner: a room keeps its own and is told what happened by methods
named for the event; it says what it makes of it, and the stage decides and acts.

The life of a turn here:

1. While the caller speaks, the history is prefilled into the generator's cache.
2. A ``SpeculativeTranscriptFrame`` (decoded at pause onset) starts the reply at once —
   preemptive generation. Its pieces stream to TTS; playout holds the audio back.
3. The final transcript confirms the speculation (or restarts the reply on the new text), and
   the end-of-turn detector turns it into P(the utterance is complete) and that into a wait:
   the turn is committed once the silence since the end of speech has lasted that long — at
   once for "seven of clubs", up to ``max_wait_ms`` for "he was not an ill disposed".
4. ``TurnCommittedFrame`` releases the held audio.
5. Speech before the commit, or before any of the reply was heard, *continues* the same user
   turn: the reply is dropped unheard (traced as discarded) and the transcripts are joined.
   Speech while the reply is heard pauses it (``PlayoutGate``) until its transcript says what
   it was: a backchannel, a cough or line noise resumes the reply where it stopped; real
   words are a **barge-in**: generation and synthesis stop, queued audio is flushed, and the
   agent's turn in the history is cut to the words heard.

A caller who asks the agent to wait ("hold on", "one moment, let me find my card") gets
``hold_reply`` instead of an answer, or nothing at all.

A reply may call tools (docs/tools.md): the generator ends a round with the calls, they run
(a read-only one at once, even for a reply generated ahead of the commit; one that acts only
once the turn is committed), and the generator is asked again with their results, for up to
``tools.max_rounds`` rounds. Words before a call are spoken at once; if the caller has heard
nothing ``tools.filler_after_ms`` after the commit, ``tools.filler`` is. A barge-in cancels
the calls in flight that can be cancelled and leaves the others to finish; the history keeps
every call, its result (or that it was cancelled) and the words heard. A reply that called
``end_call`` hangs up once it has been heard to its end.

When a stage fails the caller still hears something (``faults``): a generator that raises,
reports an error, or gives no text for ``llm_timeout_ms`` ends its reply there — with
``reply_fallback`` if none of it was spoken — and an utterance that could not be transcribed
is answered with ``transcript_fallback``. The reason goes into the turn's trace.
"""

from cadence.pipeline.stages.turn.stage import TurnStage

__all__ = ["TurnStage"]
