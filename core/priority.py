"""Work on a few cores, the caller's wait first.

On two cores, what the caller is waiting for — the transcript that decides the turn, the
reply's first piece and its first phrase's audio — must not queue behind what is needed only
later: the rest of the reply, spoken at speaking pace, or a live caption. Two pieces say which
is which:

* ``PriorityWorker`` runs blocking jobs (a whisper decode, a Piper chunk) on its own threads,
  every urgent job before any background one; a job whose caller stopped waiting before it
  started is dropped, so an abandoned decode never delays the next.
* ``UrgentWork`` counts the urgent jobs queued or running in the process, so that background
  work anywhere — a later phrase on the Piper thread, the generator's later blocks in
  torch's — waits for none to be left before it starts, within a bound (``max_wait_ms``) so
  that it never starves.

The count is process-wide (``URGENT_WORK``) because the cores are: one call's first phrase
goes before another call's last.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TypeVar

from cadence.core.clock import Clock

T = TypeVar("T")


POLL_S = 0.01
"""How often a worker thread waiting for quiet looks whether a job of its own came first."""


class Priority(IntEnum):
    """Lower runs first."""

    URGENT = 0
    """The caller is waiting for it now."""
    BACKGROUND = 1
    """Needed later, or never (a caption, the rest of a reply)."""


class UrgentWork:
    """How many urgent jobs are queued or running; background work waits for none, for
    ``max_wait_ms`` at most (``threads.background_wait_ms`` sets the process's)."""

    def __init__(self, max_wait_ms: float = 250.0) -> None:
        self.max_wait_ms = max_wait_ms
        self._count = 0
        self._lock = threading.Lock()
        self._quiet = threading.Condition(self._lock)
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []

    @property
    def count(self) -> int:
        return self._count

    def started(self) -> None:
        with self._lock:
            self._count += 1

    def finished(self) -> None:
        """One urgent job is done (safe from any thread)."""
        with self._lock:
            self._count -= 1
            if self._count > 0:
                return
            self._quiet.notify_all()
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            loop.call_soon_threadsafe(_wake, waiter)

    def quiet_blocking(self, stop_waiting: Callable[[], bool]) -> None:
        """On a worker thread: return once no urgent job is queued or running, once
        ``stop_waiting()``, or after ``max_wait_ms``."""
        deadline = time.monotonic() + self.max_wait_ms / 1000.0
        with self._quiet:
            while self._count > 0 and not stop_waiting():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._quiet.wait(min(left, POLL_S))

    async def quiet(self, clock: Clock) -> None:
        """Return once no urgent job is queued or running, or after ``max_wait_ms``."""
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[None] = loop.create_future()
        with self._lock:
            if self._count <= 0:
                return
            self._waiters.append((loop, waiter))
        timer = asyncio.ensure_future(clock.sleep_until(clock.now_ms() + self.max_wait_ms))
        try:
            await asyncio.wait({waiter, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            with self._lock:
                if (loop, waiter) in self._waiters:
                    self._waiters.remove((loop, waiter))


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


URGENT_WORK = UrgentWork()
"""The process's urgent work: every worker reports to it, and the turn engine reads it."""


@dataclass(order=True)
class _Job:
    priority: Priority
    number: int
    run: Callable[[], Any] = field(compare=False)
    future: Future[Any] = field(compare=False)


class PriorityWorker:
    """``threads`` threads running blocking jobs, urgent ones first, in order within a
    priority; a background job starts only once no urgent job of the process is left (within
    the bound), and gives way to an urgent job of its own worker that comes meanwhile. The
    threads are daemons: a worker lives as long as the model it serves, which is loaded once
    per process."""

    def __init__(self, name: str, *, threads: int = 1, urgent: UrgentWork = URGENT_WORK) -> None:
        self._jobs: queue.PriorityQueue[_Job] = queue.PriorityQueue()
        self._numbers = itertools.count()
        self._urgent = urgent
        self._pending = 0
        self._pending_lock = threading.Lock()
        for n in range(threads):
            threading.Thread(target=self._serve, name=f"{name}-{n}", daemon=True).start()

    @property
    def pending(self) -> int:
        """Jobs queued or running (a job dropped before it started is not)."""
        return self._pending

    async def run(self, fn: Callable[..., T], *args: Any, priority: Priority) -> T:
        """``fn(*args)`` on a worker thread. Cancelling the await drops the job if it has not
        started; one that has runs to its end, its result unused."""
        future: Future[T] = Future()
        with self._pending_lock:
            self._pending += 1
        future.add_done_callback(self._done)
        if priority is Priority.URGENT:
            self._urgent.started()
            future.add_done_callback(lambda _: self._urgent.finished())
        self._jobs.put(_Job(priority, next(self._numbers), lambda: fn(*args), future))
        return await asyncio.wrap_future(future)

    def _done(self, _: Future[Any]) -> None:
        with self._pending_lock:
            self._pending -= 1

    def _urgent_queued(self) -> bool:
        with self._jobs.mutex:
            return bool(self._jobs.queue) and self._jobs.queue[0].priority is Priority.URGENT

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job.priority is Priority.BACKGROUND and not job.future.cancelled():
                self._urgent.quiet_blocking(self._urgent_queued)
                if self._urgent_queued():
                    self._jobs.put(job)  # its place is kept: it has its number
                    continue
            if not job.future.set_running_or_notify_cancel():
                continue  # its caller stopped waiting before it started
            try:
                result = job.run()
            except BaseException as exc:
                job.future.set_exception(exc)
            else:
                job.future.set_result(result)
