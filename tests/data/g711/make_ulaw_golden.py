"""Writes ``ulaw_golden.npz``: the classic G.711 μ-law codec's answer for every input — the
μ-law byte of each of the 65,536 int16 samples, in order from −32768 (``encoded``), and the
int16 sample of each of the 256 bytes, in order from 0 (``decoded``) — so that the bit-exact
check runs on every Python, ``audioop`` or not.

Made once with CPython 3.11.7's ``audioop`` (removed from the standard library in 3.13):
``.venv/bin/python tests/data/g711/make_ulaw_golden.py``. Not Cadence's own codec: the table
is the reference the codec is checked against.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np

GOLDEN = Path(__file__).with_name("ulaw_golden.npz")


def main() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import audioop  # the reference: gone in Python 3.13

    samples = np.arange(-32768, 32768, dtype=np.int16)
    codes = np.arange(256, dtype=np.uint8)
    encoded = np.frombuffer(audioop.lin2ulaw(samples.tobytes(), 2), dtype=np.uint8)
    decoded = np.frombuffer(audioop.ulaw2lin(codes.tobytes(), 2), dtype=np.int16)
    np.savez_compressed(GOLDEN, encoded=encoded, decoded=decoded)
    print(f"{GOLDEN}: {len(samples)} samples, {len(codes)} codes ({sys.version.split()[0]})")


if __name__ == "__main__":
    main()
