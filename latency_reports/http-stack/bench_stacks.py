"""What serving HTTP POST costs the audio path: the server's CPU per media message of a
Twilio-shaped stream, under three ways of serving one port (docs/web.md, "One port, and
POST").

* ``websockets`` — the server as it was: ``websockets.asyncio.server.serve``, GET only;
* ``body-reading`` — the same, with ``create_connection=BodyReadingConnection`` (what
  Cadence ships: a POST's small body is lifted off the wire before the head is parsed);
* ``asgi`` — uvicorn and Starlette, the usual ASGI stack (FastAPI's), serving the websocket
  through ASGI's ``receive``/``send`` messages.

Each server echoes every text message it receives (one receive and one send, as a call
reads the caller's audio and writes the reply's). ``STREAMS`` clients each send
``MESSAGES`` messages of a Twilio ``media`` message's size, one at a time, waiting for each
echo (no two messages share a read: the per-message cost at its highest). The figure is the
server process's CPU time (user + system, from /proc via psutil) over the run, per message.
The variants run interleaved, ``ROUNDS`` times each, so that they see the same load from the
rest of the machine; the medians are reported.

Run (uvicorn and Starlette are not Cadence's dependencies; put them on a path of their own):
    pip install --target /tmp/asgi uvicorn==0.38.0 starlette==0.50.0
    ASGI_PATH=/tmp/asgi .venv/bin/python latency_reports/http-stack/bench_stacks.py
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
from websockets.asyncio.client import connect

from cadence.core.stats import median
from cadence.report.files import write_report

STREAMS = 8
MESSAGES = 3000
ROUNDS = 5
VARIANTS = ("websockets", "body-reading", "asgi")
MEDIA = json.dumps(
    {
        "event": "media",
        "streamSid": "MZ" + "0" * 32,
        "media": {"payload": "/" * 216},  # 160 μ-law bytes, base64: 20 ms of a phone call
    }
)
OUT = Path(__file__).parent

SERVER = r"""
import asyncio, sys
variant, port = sys.argv[1], int(sys.argv[2])

async def echo(websocket):
    async for message in websocket:
        await websocket.send(message)

async def plain(create_connection=None):
    from websockets.asyncio.server import serve
    extra = {} if create_connection is None else {"create_connection": create_connection}
    async with serve(echo, "127.0.0.1", port, compression=None, **extra):
        print("ready", flush=True)
        await asyncio.Future()

if variant == "websockets":
    asyncio.run(plain())
elif variant == "body-reading":
    from cadence.web.request_body import BodyReadingConnection
    asyncio.run(plain(BodyReadingConnection))
else:
    import uvicorn
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute

    async def endpoint(websocket):
        await websocket.accept()
        try:
            while True:
                await websocket.send_text(await websocket.receive_text())
        except Exception:
            pass

    app = Starlette(routes=[WebSocketRoute("/", endpoint)])
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                            ws="websockets", ws_per_message_deflate=False, lifespan="off")
    server = uvicorn.Server(config)

    async def main():
        task = asyncio.create_task(server.serve())
        while not server.started:
            await asyncio.sleep(0.01)
        print("ready", flush=True)
        await task
    asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def stream(port: int) -> None:
    async with connect(f"ws://127.0.0.1:{port}/", compression=None) as websocket:
        for _ in range(MESSAGES):
            await websocket.send(MEDIA)
            await websocket.recv()


async def streams(port: int) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(stream(port) for _ in range(STREAMS)))
    return time.perf_counter() - start


def run(variant: str) -> dict[str, float]:
    port = free_port()
    env = dict(os.environ)
    if variant == "asgi":
        env["PYTHONPATH"] = os.environ["ASGI_PATH"]
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, variant, str(port)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().strip() == "ready"
        process = psutil.Process(server.pid)
        before = process.cpu_times()
        wall = asyncio.run(streams(port))
        after = process.cpu_times()
    finally:
        server.terminate()
        server.wait()
    cpu = (after.user - before.user) + (after.system - before.system)
    messages = STREAMS * MESSAGES
    return {"cpu_us_per_message": 1e6 * cpu / messages, "wall_s": wall}


def main() -> None:
    runs: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    for _ in range(ROUNDS):
        for variant in VARIANTS:
            runs[variant].append(run(variant))
    medians = {
        variant: median(r["cpu_us_per_message"] for r in results)
        for variant, results in runs.items()
    }
    result = {
        "streams": STREAMS,
        "messages_per_stream": MESSAGES,
        "rounds": ROUNDS,
        "median_cpu_us_per_message": medians,
        "runs": runs,
    }
    write_report(OUT, {"stacks.json": result})
    for variant in VARIANTS:
        print(f"{variant:>13}: {medians[variant]:6.1f} µs of server CPU per message (median)")


if __name__ == "__main__":
    main()
