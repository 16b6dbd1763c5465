"""A TURN server for the tests: Debian's coturn on a loopback address of its own, with a
shared secret (``use-auth-secret``, the TURN REST API), started and stopped by the test.

It listens and relays on ``TURN_HOST`` (127.0.0.2): not an address either WebRTC peer has a
host candidate on (aioice never offers loopback; Chromium offers 127.0.0.1 at most), so a
path through it is a path through the relay. ``--allow-loopback-peers`` lets it relay
between two allocations on loopback, which coturn refuses by default.
"""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from prerequisites import requires

TURNSERVER = shutil.which("turnserver")
needs_coturn = requires(
    TURNSERVER is not None, "needs coturn's turnserver (`make system-packages` installs it)"
)
"""Mark of a test that starts a TURN server: skipped without coturn, failed in CI."""

TURN_HOST = "127.0.0.2"
STUN_MAGIC = 0x2112A442


@dataclass(frozen=True)
class TurnServer:
    url: str
    """The ``turn:`` URL to configure (UDP)."""
    secret: str
    log: Path

    def allocations(self) -> int:
        """How many allocations coturn has granted so far (its log, one line each)."""
        return self.log.read_text(errors="replace").count("ALLOCATE processed, success")


def free_udp_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def answers_stun(host: str, port: int) -> bool:
    """Whether a STUN binding request to ``host:port`` (UDP) gets its response in 0.2 s."""
    transaction = os.urandom(12)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.settimeout(0.2)
        probe.sendto(struct.pack("!HHI", 0x0001, 0, STUN_MAGIC) + transaction, (host, port))
        try:
            answer, _ = probe.recvfrom(2048)
        except TimeoutError:
            return False
    return answer[:2] == b"\x01\x01" and answer[8:20] == transaction


@contextmanager
def coturn(workdir: Path, timeout_s: float = 10.0) -> Iterator[TurnServer]:
    """A running coturn, until the block ends."""
    assert TURNSERVER is not None
    port = free_udp_port(TURN_HOST)
    secret = os.urandom(16).hex()
    log = workdir / "turnserver.log"
    args = [
        TURNSERVER,
        "--log-file=stdout",  # a path given here was never written (coturn 4.6.1)
        "--simple-log",
        "--verbose",
        f"--listening-ip={TURN_HOST}",
        f"--listening-port={port}",
        f"--relay-ip={TURN_HOST}",
        "--use-auth-secret",
        f"--static-auth-secret={secret}",
        "--realm=cadence.test",
        "--allow-loopback-peers",
        "--no-cli",
        "--no-tls",
        "--no-dtls",
        "--no-tcp-relay",
        "--fingerprint",
        f"--pidfile={workdir / 'turnserver.pid'}",
        f"--userdb={workdir / 'turndb'}",
        "--no-software-attribute",
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(args, stdout=output, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + timeout_s
        while not answers_stun(TURN_HOST, port):  # each try waits 0.2 s for an answer
            if process.poll() is not None:
                raise RuntimeError(f"turnserver exited with {process.returncode}: see {log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"turnserver did not answer within {timeout_s:.0f} s")
        yield TurnServer(f"turn:{TURN_HOST}:{port}?transport=udp", secret, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
