"""``WorkerPool``: ``server.workers`` server processes on one port, kept at that number.

Each worker is a whole server (``serve_until_stopped``) in a process of its own: its own
models, its own event loop and speech-recognition thread, its own ``server.max_sessions``
calls. They listen on the same port with ``SO_REUSEPORT``, and the kernel hands each new
connection to one of their sockets — no process of ours stands between a caller and its
worker, so a worker's death ends only its own calls. Why the kernel and not a parent that
passes accepted connections on: docs/deploy.md ("Workers").

The pool (the parent process) only supervises:

* it starts the workers (``spawn``: a fresh interpreter each, nothing inherited but the
  configuration and the logging levels) and prints the URL once every one listens;
* a worker that dies is logged with its exit status and started again — at once if it had
  run a while, after a growing pause if it keeps dying young; one that dies before it ever
  listened, at the first start, fails the pool (a missing model would fail them all alike);
* SIGTERM or SIGINT is passed on to every worker, which drains or closes as a lone server
  does; the pool exits when they have, and kills those still there past
  ``server.drain_timeout_s`` and a margin.

The metrics of every worker are one set (``web/metrics.py``): the pool gives them a
directory for prometheus-client's multiprocess files, and removes it at the end.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType

from prometheus_client import multiprocess

from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.config.server import audiosocket_address
from cadence.web.metrics import MULTIPROCESS_DIR_ENV

logger = logging.getLogger(__name__)

POLL_S = 0.5
"""How often the pool looks at its workers and the signals it got, at most."""
YOUNG_S = 10.0
"""A worker that dies sooner than this after its start is restarted after a pause."""
FIRST_RESTART_PAUSE_S = 1.0
MAX_RESTART_PAUSE_S = 30.0
"""The pause before restarting a worker that dies young doubles each time, up to this."""
STOP_MARGIN_S = 15.0
"""How long past ``server.drain_timeout_s`` a stopping worker may take to close its calls
before it is killed."""


@dataclass(frozen=True)
class LogSettings:
    """The parent's logging, for a worker to set up the same: a spawned interpreter has none."""

    root_level: int
    levels: dict[str, int]
    """Every logger whose level was set (the CLI quiets the chatty ones)."""
    worker: int

    @classmethod
    def of_this_process(cls, worker: int) -> LogSettings:
        levels = {
            name: logger.level
            for name, logger in logging.root.manager.loggerDict.items()
            if isinstance(logger, logging.Logger) and logger.level != logging.NOTSET
        }
        return cls(logging.getLogger().getEffectiveLevel(), levels, worker)

    def apply(self) -> None:
        logging.basicConfig(
            level=self.root_level,
            format=f"%(asctime)s %(levelname)s worker {self.worker} %(name)s: %(message)s",
        )
        for name, level in self.levels.items():
            logging.getLogger(name).setLevel(level)


ServerMain = Callable[[CadenceConfig, Callable[[str], None]], int]
"""What a worker runs: one server with this configuration until it is stopped, telling its
URL to the callback once it listens; returns the exit status. A module-level function (the
CLI's ``run_server``), so that a spawned interpreter can import it."""


def run_worker(
    main: ServerMain, config: dict[str, object], log: LogSettings, ready: Connection
) -> None:
    """A worker process: ``main`` until it is stopped, its URL sent to ``ready`` once it
    listens; exits with ``main``'s status."""
    log.apply()
    try:
        status = main(CadenceConfig.model_validate(config), ready.send)
    except KeyboardInterrupt:
        status = 0  # Ctrl-C while the models load: the terminal's SIGINT reaches every worker
    finally:
        # The pool passes on the signal the worker may have had already: it has stopped.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
    raise SystemExit(status)


@dataclass
class _Worker:
    index: int
    process: BaseProcess
    ready: Connection
    """The worker's end of it sends the URL once it listens."""
    started_at: float
    listening: bool = False


@dataclass
class _Restarts:
    """When each dead worker is due to start again, and how long its next pause would be."""

    due: dict[int, float] = field(default_factory=dict)
    pause_s: dict[int, float] = field(default_factory=dict)

    def schedule(self, index: int, lived_s: float, now: float) -> float:
        if lived_s >= YOUNG_S:
            self.pause_s.pop(index, None)
            pause = 0.0
        else:
            pause = self.pause_s.get(index, FIRST_RESTART_PAUSE_S)
            self.pause_s[index] = min(2 * pause, MAX_RESTART_PAUSE_S)
        self.due[index] = now + pause
        return pause

    def take_due(self, now: float) -> list[int]:
        due = [index for index, at in self.due.items() if at <= now]
        for index in due:
            del self.due[index]
        return due


class WorkerPoolError(RuntimeError):
    """The pool could not start: a worker failed before it ever listened."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
        """The worker's exit status, which the pool exits with."""


class WorkerPool:
    def __init__(
        self, config: CadenceConfig, on_ready: Callable[[str], None], main: ServerMain
    ) -> None:
        """``on_ready`` gets the URL once every worker listens; each worker runs ``main``."""
        self._context = multiprocessing.get_context("spawn")
        self._config = config
        self._main = main
        self._on_ready = on_ready
        self._workers: dict[int, _Worker] = {}
        self._restarts = _Restarts()
        self._signals: list[signal.Signals] = []
        self._stopping_since: float | None = None
        self._announced = False
        self._reserved: list[socket.socket] = []
        self._wakeup: socket.socket | None = None
        """Readable when a signal came (``run`` makes it)."""

    def run(self) -> int:
        """Run the workers until a signal stops them all; returns the exit status (0, or that
        of a worker that failed to start). Call it on the main thread: it sets the signals'
        handlers."""
        metrics_dir, own_dir = self._metrics_dir()
        previous = {s: signal.signal(s, self._received) for s in (signal.SIGINT, signal.SIGTERM)}
        # A signal also writes a byte here, which wakes the wait for the workers at once.
        wakeup, wakeup_writer = socket.socketpair()
        self._wakeup = wakeup
        wakeup_writer.setblocking(False)
        previous_wakeup = signal.set_wakeup_fd(wakeup_writer.fileno())
        try:
            self._config = self._with_fixed_ports(self._config)
            settings = self._config.server
            logger.info(
                "%d workers on port %d, %d calls each, %d in all",
                settings.workers,
                settings.port,
                settings.max_sessions,
                settings.workers * settings.max_sessions,
            )
            for index in range(settings.workers):
                self._start(index)
            self._supervise()
            return 0
        except WorkerPoolError as exc:
            logger.error("%s", exc)
            self._stop_all(signal.SIGINT)
            for worker in self._workers.values():
                worker.process.join(STOP_MARGIN_S)
                if worker.process.is_alive():
                    worker.process.kill()
                    worker.process.join()
            return exc.status
        finally:
            signal.set_wakeup_fd(previous_wakeup)
            wakeup.close()
            wakeup_writer.close()
            self._wakeup = None
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            for reserved in self._reserved:
                reserved.close()
            if own_dir:
                shutil.rmtree(metrics_dir, ignore_errors=True)
                del os.environ[MULTIPROCESS_DIR_ENV]

    # --- inside -------------------------------------------------------------------------------

    def _received(self, signum: int, frame: FrameType | None) -> None:
        self._signals.append(signal.Signals(signum))

    def _metrics_dir(self) -> tuple[str, bool]:
        """The directory of the shared metrics, and whether the pool made it (and removes it)."""
        if (given := os.environ.get(MULTIPROCESS_DIR_ENV)) is not None:
            return given, False
        made = tempfile.mkdtemp(prefix="cadence-metrics-")
        os.environ[MULTIPROCESS_DIR_ENV] = made
        return made, True

    def _with_fixed_ports(self, config: CadenceConfig) -> CadenceConfig:
        """Port 0 ("any free port") chosen once for all the workers: the pool holds a bound
        socket on it, never listening, so that no other program takes it meanwhile."""
        server = config.server
        telephony = config.telephony
        if server.port == 0:
            server = server.model_copy(update={"port": self._reserve(server.host)})
        if telephony.audiosocket is not None:
            host, port = audiosocket_address(telephony.audiosocket)
            if port == 0:
                address = f"[{host}]" if ":" in host else host
                chosen = f"{address}:{self._reserve(host)}"
                telephony = telephony.model_copy(update={"audiosocket": chosen})
        return config.model_copy(update={"server": server, "telephony": telephony})

    def _reserve(self, host: str) -> int:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        reserved = socket.socket(family, socket.SOCK_STREAM)
        reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        reserved.bind((host, 0))
        self._reserved.append(reserved)
        port: int = reserved.getsockname()[1]
        return port

    def _start(self, index: int) -> None:
        receiving, sending = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=run_worker,
            args=(
                self._main,
                self._config.model_dump(mode="json"),
                LogSettings.of_this_process(index),
                sending,
            ),
            name=f"cadence-worker-{index}",
        )
        process.start()
        sending.close()  # the worker's end; ours is `receiving`
        self._workers[index] = _Worker(index, process, receiving, time.monotonic())
        logger.info("worker %d started (pid %d)", index, process.pid)

    def _supervise(self) -> None:
        assert self._wakeup is not None
        while self._workers or (self._restarts.due and self._stopping_since is None):
            waitables: list[Connection | socket.socket | int] = [self._wakeup]
            for worker in self._workers.values():
                waitables.append(worker.process.sentinel)
                if not worker.listening:
                    waitables.append(worker.ready)
            if self._wakeup in wait(waitables, timeout=POLL_S):
                self._wakeup.recv(64)
            self._read_ready()
            self._reap()
            self._handle_signals()
            if self._stopping_since is None:
                for index in self._restarts.take_due(time.monotonic()):
                    self._start(index)
            else:
                self._kill_stragglers()

    def _read_ready(self) -> None:
        for worker in self._workers.values():
            if worker.listening or not worker.ready.poll():
                continue
            try:
                url = worker.ready.recv()
            except EOFError:
                continue  # it died first: `_reap` tells why
            worker.listening = True
            logger.info("worker %d (pid %d) listens", worker.index, worker.process.pid)
            listening = [w for w in self._workers.values() if w.listening]
            if not self._announced and len(listening) == self._config.server.workers:
                self._announced = True
                self._on_ready(url)

    def _reap(self) -> None:
        now = time.monotonic()
        for index, worker in list(self._workers.items()):
            if worker.process.is_alive():
                continue
            worker.process.join()
            del self._workers[index]
            worker.ready.close()
            pid = worker.process.pid
            if pid is not None:
                # Its calls leave the live gauges (prometheus-client leaves this unannotated).
                multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
            status = _exit_status(worker.process.exitcode)
            if self._stopping_since is not None:
                logger.info("worker %d (pid %s) stopped: %s", index, pid, status)
                continue
            if not worker.listening and not self._announced:
                code = worker.process.exitcode
                raise WorkerPoolError(
                    f"worker {index} failed to start ({status})", code if code and code > 0 else 1
                )
            pause = self._restarts.schedule(index, now - worker.started_at, now)
            logger.error(
                "worker %d (pid %s) died: %s; its calls ended; restarting it in %.0f s",
                index,
                pid,
                status,
                pause,
            )

    def _handle_signals(self) -> None:
        while self._signals:
            received = self._signals.pop(0)
            logger.info("received %s: passing it to %d workers", received.name, len(self._workers))
            if self._stopping_since is None:
                self._stopping_since = time.monotonic()
            self._stop_all(received)

    def _stop_all(self, signum: signal.Signals) -> None:
        self._restarts.due.clear()
        for worker in self._workers.values():
            if worker.process.pid is not None and worker.process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.process.pid, signum)
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()

    def _kill_stragglers(self) -> None:
        assert self._stopping_since is not None
        limit = self._config.server.drain_timeout_s + STOP_MARGIN_S
        if time.monotonic() - self._stopping_since < limit:
            return
        for worker in self._workers.values():
            if worker.process.is_alive():
                logger.error("worker %d did not stop within %.0f s: killed", worker.index, limit)
                worker.process.kill()


def _exit_status(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"
