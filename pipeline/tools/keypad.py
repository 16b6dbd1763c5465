"""``Keypad``: the keys the caller presses during a call (telephony DTMF), for the tools to
read — "key in your order number, then the hash key"."""

from __future__ import annotations

import asyncio


class Keypad:
    """Every key of the call in order (``pressed``), and reads of the keys to come."""

    def __init__(self) -> None:
        self.pressed = ""
        """Every key pressed so far in the call."""
        self._readers: list[asyncio.Queue[str]] = []

    def press(self, digit: str) -> None:
        self.pressed += digit
        for reader in self._readers:
            reader.put_nowait(digit)

    async def read(self, max_digits: int, *, until: str = "#", timeout_s: float = 10.0) -> str:
        """The keys pressed from now on: up to ``max_digits``, or until the key ``until``
        (not included), or what came before ``timeout_s`` passed — possibly nothing."""
        reader: asyncio.Queue[str] = asyncio.Queue()
        self._readers.append(reader)
        digits = ""
        try:
            async with asyncio.timeout(timeout_s):
                while len(digits) < max_digits:
                    digit = await reader.get()
                    if digit == until:
                        break
                    digits += digit
        except TimeoutError:
            pass
        finally:
            self._readers.remove(reader)
        return digits
