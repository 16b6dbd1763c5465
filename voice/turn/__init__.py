"""End of turn: how likely it is that the caller has finished speaking, read off the transcript
(``text_model.py``); an acoustic model will sit beside it."""

from cadence.voice.turn.text_model import TextEndOfTurnModel, TextEndOfTurnModelError

__all__ = ["TextEndOfTurnModel", "TextEndOfTurnModelError"]
