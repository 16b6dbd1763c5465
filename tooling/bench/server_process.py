"""``cadence serve --workers N`` as a deployment runs it: the real command in a process group
of its own on a free loopback port, ready once ``/readyz`` answers and every worker listens —
what ``cadence bench-workers`` and the worker tests measure from outside.

Its workers are the processes that listen on the port; their calls, the connections
established on it; their CPU time read with psutil (the pool and every worker alive now).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

START_TIMEOUT_S = 180.0
"""How long the pool may take to load every worker's models and listen."""


class ServerProcess:
    """``cadence serve --workers N`` on a free loopback port, in a process group of its own."""

    def __init__(self, workers: int, config: Path, log: Path | None = None) -> None:
        """``config``: a configuration file; ``log``: where the server's output goes (by
        default, this process's)."""
        self.workers = workers
        self.log = log
        self.port = free_port()
        self.command = [
            str(Path(sys.executable).with_name("cadence")),  # the command a deployment runs
            "serve",
            "--config",
            str(config),
            "--port",
            str(self.port),
            "--workers",
            str(workers),
        ]
        self.process: asyncio.subprocess.Process | None = None

    @property
    def twilio_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/twilio"

    async def start(self) -> None:
        with contextlib.ExitStack() as files:
            output = None if self.log is None else files.enter_context(self.log.open("ab"))
            self.process = await asyncio.create_subprocess_exec(
                *self.command, start_new_session=True, stdout=output, stderr=output
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.returncode is not None:
                raise RuntimeError(f"the server exited with {self.process.returncode}")
            if await asyncio.to_thread(self._ready) and len(self.worker_pids()) == self.workers:
                return
            await asyncio.sleep(0.5)
        raise RuntimeError(f"the server was not ready within {START_TIMEOUT_S:.0f} s")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=5):
                return True
        except (urllib.error.URLError, OSError):
            return False  # not listening yet, or 503

    def worker_pids(self) -> list[int]:
        """The processes that listen on the port: the workers (the pool itself, with one
        worker, is the server)."""
        assert self.process is not None
        family = [psutil.Process(self.process.pid)]
        with contextlib.suppress(psutil.NoSuchProcess):
            family += family[0].children(recursive=True)
        return [p.pid for p in family if _listens(p, self.port)]

    def calls_by_worker(self) -> dict[int, int]:
        """Each worker's established connections on the port: its calls in progress."""
        counts = {}
        for pid in self.worker_pids():
            with contextlib.suppress(psutil.NoSuchProcess):
                connections = psutil.Process(pid).net_connections(kind="tcp")
                counts[pid] = sum(
                    1
                    for c in connections
                    if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == self.port
                )
        return counts

    def cpu_seconds(self) -> float:
        """CPU time of the pool and every worker alive now (user and system)."""
        assert self.process is not None
        total = 0.0
        with contextlib.suppress(psutil.NoSuchProcess):
            parent = psutil.Process(self.process.pid)
            for process in [parent, *parent.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    times = process.cpu_times()
                    total += times.user + times.system
        return total

    def signal(self, signum: signal.Signals) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    async def stop(self) -> int | None:
        """Stop the pool (SIGINT: at once) and wait for it; its exit status."""
        if self.process is None:
            return None
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGINT)
        try:
            return await asyncio.wait_for(self.process.wait(), 30.0)
        except TimeoutError:
            os.killpg(self.process.pid, signal.SIGKILL)
            return await self.process.wait()


def _listens(process: psutil.Process, port: int) -> bool:
    with contextlib.suppress(psutil.Error):
        return any(
            c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port
            for c in process.net_connections(kind="tcp")
        )
    return False


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
