"""The KV cache of a conversation, with the token ids it was computed from.

A new turn's prompt usually extends what is cached (the history was prefilled while the user
spoke, or by the previous reply): only the new tokens are prefilled. Where the prompt departs
from the cache (an older turn dropped, a reply re-tokenized differently), the cache keeps the
whole blocks before the first difference and forgets the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

from cadence.llm.kv_cache import ConversationStore


class ConversationCache:
    def __init__(self, kv: ConversationStore, block_size: int) -> None:
        self._block_size = block_size
        self.kv = kv
        self.ids: list[int] = []
        """Token ids whose keys and values are cached, position by position."""

    def reuse(self, context: Sequence[int]) -> list[int]:
        """Keep the cached whole blocks that ``context`` starts with; return the rest of
        ``context``, which the caller prefills."""
        common = 0
        for cached, wanted in zip(self.ids, context, strict=False):
            if cached != wanted:
                break
            common += 1
        keep = common - common % self._block_size
        self.kv.truncate(keep)
        del self.ids[keep:]
        return list(context[keep:])
