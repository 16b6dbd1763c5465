"""Where the int8 graphs live and when they are built: once per set of inputs, outside the
repository, shared by every process.

A graph is a function of its inputs — the base model's file, the adapter merged into it, the
graph's version and the versions of the exporter and quantizer — so its file name is a digest
of them: a changed input names another file, and a stale graph is never loaded (it is left to
be cleaned with the cache folder). The folder is ``$CADENCE_CACHE_DIR``, else
``$XDG_CACHE_HOME/cadence``, else ``~/.cache/cadence``, with the graphs in ``engines/``.

Building takes about 40 s and 3 GB of memory (the float32 network, the exported graph); it
happens at install (``make``, and the container image's build, run ``cadence prepare``) or
else on first use, logged. Two processes starting together (the server's workers) build it
once: the builder holds a lock on the folder and writes under a temporary name, renamed into
place when whole.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path

import onnxruntime
import torch

from cadence.llm.engine.graph import GRAPH_VERSION, export_int8
from cadence.llm.engine.onnx_network import OnnxNetwork
from cadence.llm.open_weights.network import QwenForCausalLM

logger = logging.getLogger(__name__)


class EngineError(RuntimeError):
    """The graph cannot be built or loaded; the message names the configuration key."""


def engine_dir() -> Path:
    """The folder of the built graphs (see the module)."""
    if folder := os.environ.get("CADENCE_CACHE_DIR"):
        return Path(folder).expanduser() / "engines"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "cadence" / "engines"


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (once per process and version of the file)."""
    stat = path.stat()
    return _digest(path, stat.st_size, stat.st_mtime_ns)


@cache
def _digest(path: Path, size: int, modified_ns: int) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def graph_key(*inputs: Path) -> str:
    """The name of the graph built from ``inputs`` (files) by this version of the exporter."""
    digest = hashlib.sha256()
    for part in (
        f"graph {GRAPH_VERSION}",
        f"torch {torch.__version__}",
        f"onnxruntime {onnxruntime.__version__}",
        *(file_digest(path.resolve()) for path in inputs),
    ):
        digest.update(part.encode() + b"\n")
    return digest.hexdigest()[:24]


def int8_network(
    name: str, inputs: tuple[Path, ...], build: Callable[[], QwenForCausalLM], key: str
) -> OnnxNetwork:
    """The int8 graph of the network that ``build`` makes from ``inputs`` (files), built now
    if it is not there; ``name`` says which model in the log, ``key`` is the configuration key
    an error names."""
    folder = engine_dir()
    path = folder / f"{name}-{graph_key(*inputs)}.int8.onnx"
    if not path.is_file():
        _build(path, build, name, key)
    try:
        return OnnxNetwork.load(path)
    except Exception as exc:  # onnxruntime's own errors: a damaged file
        raise EngineError(
            f"{key}: the int8 graph {path} does not load ({exc}); delete it to build it anew"
        ) from exc


def _build(path: Path, build: Callable[[], QwenForCausalLM], name: str, key: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with (path.parent / ".lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be building it
            if path.is_file():
                return
            logger.info("building the int8 graph of %s in %s (once, about 40 s)", name, path)
            started = time.monotonic()
            partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
            try:
                export_int8(build(), partial)
                os.replace(partial, path)
            finally:
                partial.unlink(missing_ok=True)
            logger.info("built %s in %.0f s", path.name, time.monotonic() - started)
    except OSError as exc:
        raise EngineError(f"{key}: cannot build the int8 graph in {path.parent}: {exc}") from exc
