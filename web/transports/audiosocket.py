"""Asterisk AudioSocket: phone calls bridged over plain TCP, one connection per call.

``AudioSocketListener`` accepts Asterisk's connections on ``telephony.audiosocket``. The first
frame of each names the call (its UUID, which the dialplan chose), so the listener reads it
before the call is admitted — the calls in progress are keyed by that name
(``admission.py``). An ``AudioSocketCall`` then serves the connection to its end:

* audio frames — 8 kHz signed linear caller audio, fed to the session;
* DTMF frames — a key press, handed to the session (a ``DTMFEvent`` comes out of it);
* a hang-up frame, or the connection closing — the caller hung up: the session is cancelled,
  not closed, as nobody is left to hear the rest of the reply;
* an error frame — Asterisk gave up on the call: logged with its code, and the call ends.

When the agent hangs up (its goodbye handed over to the end), or the server closes, Asterisk
gets a hang-up frame and the socket is closed: the dialplan goes on after ``AudioSocket()``.

Reply audio goes out as audio frames of 20 ms, written as the playout stage hands them over —
in real time, since AudioSocket has no marks and no way to flush what Asterisk buffered. A
frame that breaks the protocol ends only its own call: the reason is logged, Asterisk gets a
hang-up (the one frame besides audio that it understands), and the socket is closed. So does
a peer that stops reading the reply audio, rather than holding the pipeline up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from cadence.pipeline.frames import AudioOutFrame
from cadence.pipeline.pipeline import PipelineClosedError
from cadence.pipeline.session import VoiceSession
from cadence.web.access import peer_allowed
from cadence.web.metrics import ErrorKind, ServerMetrics
from cadence.web.rate_limit import MessageRate
from cadence.web.serializers.audiosocket import (
    DTMF,
    SAMPLE_RATE,
    Audio,
    AudioSocketProtocolError,
    CallUUID,
    Error,
    Hangup,
    encode_audio,
    encode_frame,
    read_frame,
)
from cadence.web.transports.admission import Admission, Unavailable
from cadence.web.transports.call import CLOSE_TIMEOUT_S, Call, CallContext

logger = logging.getLogger(__name__)

UUID_TIMEOUT_S = 5.0
"""Asterisk sends the UUID as soon as it is connected; a peer that does not is not Asterisk."""

DRAIN_TIMEOUT_S = 2.0
"""A peer that has taken no reply audio for this long has stopped reading; its call ends."""

DISCARD_BYTES = 64 * 1024
"""How much of what Asterisk still sends after a hang-up is read (and dropped) at a time."""

MAX_BUFFERED_BYTES = 8 * 1024
"""Reply audio (about half a second) waiting for the kernel to take it before ``drain``
waits. Paced audio never comes near it; only a peer that stops reading does."""


class AudioSocketAudioOutput:
    """The session's ``AudioOutput``: each reply frame goes out on the socket as it is handed
    over, in audio frames of at most 20 ms.

    ``clear`` (barge-in) has nothing to flush: the playout stage hands audio over in real time
    (at most 60 ms ahead), so nothing waits here, and AudioSocket cannot tell Asterisk to drop
    what it buffered. Without marks, what was handed over is what the playback ledger counts
    as heard. A write that cannot drain within ``DRAIN_TIMEOUT_S`` calls ``on_stalled`` and
    drops the rest of the audio, so a peer that stops reading never holds up the pipeline.
    """

    def __init__(self, writer: asyncio.StreamWriter, *, on_stalled: Callable[[], None]) -> None:
        self._writer = writer
        self._on_stalled = on_stalled
        self._stalled = False
        writer.transport.set_write_buffer_limits(high=MAX_BUFFERED_BYTES)

    async def send(self, frame: AudioOutFrame) -> None:
        if frame.sample_rate != SAMPLE_RATE:
            raise ValueError(f"AudioSocket carries {SAMPLE_RATE} Hz audio, not {frame.sample_rate}")
        if self._stalled or self._writer.is_closing():
            return
        self._writer.write(encode_audio(frame.pcm))
        try:
            async with asyncio.timeout(DRAIN_TIMEOUT_S):
                await self._writer.drain()
        except TimeoutError:
            self._stalled = True
            self._on_stalled()
        except ConnectionError:
            pass  # the caller is gone; reading finds that out and ends the call

    async def clear(self) -> None:
        """Nothing to drop: see the class docstring."""


class AudioSocketCall(Call):
    """One Asterisk call, from its UUID frame to the hang-up."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        context: CallContext,
        *,
        call_id: str,
    ) -> None:
        super().__init__(context, call_id=call_id)
        self._reader = reader
        self._writer = writer
        self._output = AudioSocketAudioOutput(writer, on_stalled=self._stalled)
        self._ended = asyncio.Event()
        self._hang_up = False
        """Whether to send Asterisk a hang-up on the way out (we end the call, not the caller)."""
        self._receiver: asyncio.Task[None] | None = None

    def hang_up(self, reason: str) -> None:
        """End the call from this side (the agent hung up, or the server is closing): Asterisk
        gets a hang-up frame, then the socket closes."""
        self._end(reason, hang_up=True)

    # --- while the call runs ------------------------------------------------------------------

    async def _serve(self) -> None:
        # The frames are read by a task of their own, so that whatever ends the call — the
        # caller, a stalled write, a failed session, the server closing — ends it alike.
        session = await self._open_session(self._output, SAMPLE_RATE)
        self._receiver = self._tasks.spawn(self._receive(session), "receive")
        await self._ended.wait()

    async def _receive(self, session: VoiceSession) -> None:
        rate = MessageRate(self._agent.config.telephony.audiosocket_max_frames_per_s)
        try:
            while True:
                frame = await read_frame(self._reader)
                if not rate.allow():
                    raise AudioSocketProtocolError(f"over {rate}")
                match frame:
                    case Audio(pcm=pcm):
                        await session.feed(pcm, SAMPLE_RATE)
                    case DTMF(digit=digit):
                        await session.dtmf(digit)
                    case Hangup():
                        self._end("the caller hung up")
                        return
                    case None:
                        self._end("the caller hung up (the connection closed)")
                        return
                    case Error() as error:
                        self._end(f"Asterisk reported {error}", kind=ErrorKind.CONNECTION_LOST)
                        return
                    case CallUUID():
                        raise AudioSocketProtocolError("a second UUID frame")
        except AudioSocketProtocolError as exc:
            self._end(f"protocol error: {exc}", kind=ErrorKind.TELEPHONY, hang_up=True)
        except ConnectionError as exc:
            self._end(f"the connection was lost ({exc!r})")
        except PipelineClosedError:
            pass  # the session failed; _fail is ending the call
        except Exception:
            self._log.exception("%s: reading the call failed", self.call_id)
            self._fail(ErrorKind.INTERNAL)

    def _fail(self, kind: ErrorKind) -> None:
        failed = (
            "the voice session failed" if kind is ErrorKind.SESSION_FAILED else "internal error"
        )
        self._end(failed, kind=kind, hang_up=True)

    def _stalled(self) -> None:
        self._writer.transport.abort()  # what it holds would never be read: drop it now
        message = f"the peer took no reply audio for {DRAIN_TIMEOUT_S:g} s"
        self._end(message, kind=ErrorKind.CONNECTION_LOST)

    def _end(self, reason: str, *, kind: ErrorKind | None = None, hang_up: bool = False) -> None:
        """Make ``run`` release the call. The first reason counts; one with an error ``kind``
        is a warning and counted in the metrics."""
        if self._ended.is_set():
            return
        report_end(self._metrics, self.call_id, reason, kind)
        self._hang_up = hang_up
        self._ended.set()

    # --- the end ------------------------------------------------------------------------------

    async def _stop_reading(self) -> None:
        if self._receiver is not None:
            self._receiver.cancel()
            await asyncio.wait([self._receiver])  # the reader is then free for the close

    async def _close(self) -> None:
        await close_connection(self._reader, self._writer, hang_up=self._hang_up)


def report_end(metrics: ServerMetrics, name: str, reason: str, kind: ErrorKind | None) -> None:
    """Log why connection ``name`` ends: a warning, counted, when it ends by an error."""
    if kind is None:
        logger.info("%s: %s", name, reason)
    else:
        logger.warning("%s: %s; ending the call", name, reason)
        metrics.errors.labels(kind.value).inc()


async def read_call_id(reader: asyncio.StreamReader) -> str | None:
    """The name of the call whose UUID frame opens the connection (``audiosocket-<uuid>``);
    ``None`` if the caller hung up first. Raises ``AudioSocketProtocolError`` if the first
    frame is another one, or none comes within ``UUID_TIMEOUT_S``."""
    try:
        async with asyncio.timeout(UUID_TIMEOUT_S):
            frame = await read_frame(reader)
    except TimeoutError:
        raise AudioSocketProtocolError(f"no UUID frame within {UUID_TIMEOUT_S:.0f} s") from None
    match frame:
        case CallUUID(uuid=uuid):
            return f"audiosocket-{uuid}"
        case None | Hangup():
            return None
        case _:
            raise AudioSocketProtocolError(
                f"the first frame must be the call's UUID, not {type(frame).__name__}"
            )


async def close_connection(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, hang_up: bool
) -> None:
    """Close the connection, after a hang-up frame if ``hang_up``; a peer that does not take
    what is left within ``CLOSE_TIMEOUT_S`` is cut off.

    After a hang-up our side is shut, and what Asterisk still sends (audio, until it reads the
    hang-up) is read and dropped until it closes its own: a socket closed with data unread is
    reset, and the reset can reach Asterisk before the hang-up frame is read."""
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            if hang_up and not writer.is_closing():
                writer.write(encode_frame(Hangup()))
                writer.write_eof()
                while await reader.read(DISCARD_BYTES):
                    pass
            writer.close()
            await writer.wait_closed()
    except (TimeoutError, OSError):  # OSError: the peer is gone already (ENOTCONN, a reset)
        writer.transport.abort()


class AudioSocketListener:
    """Accepts Asterisk's connections on one address and admits each call through
    ``admission``, whose session limit covers them with the calls of every other transport."""

    def __init__(
        self, admission: Admission, host: str, port: int, *, reuse_port: bool = False
    ) -> None:
        """``reuse_port``: other processes (the server's workers) listen on the same port."""
        self._admission = admission
        self._address = (host, port)
        self._reuse_port = reuse_port
        self.port: int | None = None
        """The port it listens on once started: the one the system chose, when asked for 0."""
        self._listener: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], AudioSocketCall | None] = {}
        """The task serving each connection, and its call once it was admitted."""

    async def start(self) -> None:
        self._listener = await asyncio.start_server(
            self._accept, *self._address, reuse_port=self._reuse_port
        )
        self.port = self._listener.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop accepting, hang up on every call and wait until each has released everything."""
        if self._listener is None:
            return
        self._listener.close()
        for task, call in self._connections.items():
            if call is None:
                task.cancel()  # no call yet (waiting for its UUID): nothing to hang up on
            else:
                call.hang_up("the server is closing")
        tasks = list(self._connections)
        if tasks:
            await asyncio.wait(tasks, timeout=2 * CLOSE_TIMEOUT_S)
        for task in tasks:
            task.cancel()  # stuck: nothing more is waited for
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._listener.wait_closed()
        self._listener = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = _current_task()
        self._connections[task] = None
        peer = writer.get_extra_info("peername")
        name = f"audiosocket@{peer[0]}:{peer[1]}" if peer else "audiosocket"
        allow = self._admission.context.agent.config.telephony.audiosocket_allow
        try:
            if peer_allowed(peer[0] if peer else "", allow):
                await self._admit(reader, writer, name)
            else:
                logger.warning("%s: refused: not in telephony.audiosocket_allow", name)
                await close_connection(reader, writer, hang_up=True)
        except Exception:
            logger.exception("%s: the connection failed", name)
            await self._turn_away(reader, writer, name, "internal error", ErrorKind.INTERNAL)
        finally:
            del self._connections[task]
            if not writer.is_closing():  # cancelled before it was served
                writer.close()

    async def _admit(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str
    ) -> None:
        admission = self._admission
        try:
            call_id = await read_call_id(reader)
        except AudioSocketProtocolError as exc:
            await self._turn_away(
                reader, writer, name, f"protocol error: {exc}", ErrorKind.TELEPHONY
            )
            return
        except ConnectionError as exc:
            await self._turn_away(reader, writer, name, f"the connection was lost ({exc!r})")
            return
        if call_id is None:
            await self._turn_away(reader, writer, name, "the caller hung up before the UUID")
        elif call_id in admission.calls:
            reason = f"protocol error: {call_id} is connected already"
            await self._turn_away(reader, writer, name, reason, ErrorKind.TELEPHONY)
        elif (unavailable := admission.unavailable) is not None:
            reason = (
                f"refused: the server is full ({admission.limit} calls)"
                if unavailable is Unavailable.BUSY
                else "refused: the server is draining"
            )
            await self._turn_away(reader, writer, call_id, reason, ErrorKind.REFUSED)
        else:
            call = AudioSocketCall(reader, writer, admission.context, call_id=call_id)
            self._connections[_current_task()] = call
            await admission.run_call(call)

    async def _turn_away(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        name: str,
        reason: str,
        kind: ErrorKind | None = None,
    ) -> None:
        """Serve no call on this connection: log why, hang up and close."""
        report_end(self._admission.metrics, name, reason, kind)
        await close_connection(reader, writer, hang_up=True)


def _current_task() -> asyncio.Task[None]:
    """The task serving a connection: asyncio runs each connection's callback in its own."""
    task = asyncio.current_task()
    assert task is not None
    return task
