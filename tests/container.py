"""The container image of deploy/Containerfile, built and run with podman (Debian's) the way
this machine allows — what ``tests/test_container.py`` does, and docs/deploy.md ("Built and
started here") explains.

* **No registry of images is reachable** here (only PyPI and Debian's packages are), so the
  base image is made from Debian's packages: ``debootstrap`` (bookworm, its Python 3.11), then
  ``podman import``; the Containerfile's ``BASE_IMAGE`` names it. Made once, then reused.
* **pip inside the build installs from where this machine's pip does**: its configuration
  (``pip config list``: index, extra indexes, wheel folders, constraints, CA bundle) is
  written into the build's ``/etc/pip.conf``, and every local file or folder it names is
  mounted read-only at the same path; the build runs on the host's network.
* **The sandbox's limits**: podman's default ``ulimit``s are above what a process here may
  raise (no ``CAP_SYS_RESOURCE``), so explicit ones are given; and crun refuses the hybrid
  cgroup layout here, so the runtime is runc.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from prerequisites import requires

PODMAN = shutil.which("podman")
DEBOOTSTRAP = shutil.which("debootstrap")
RUNC = shutil.which("runc")
needs_podman = requires(
    None not in (PODMAN, DEBOOTSTRAP, RUNC),
    "needs podman, runc and debootstrap (`make system-packages` installs them)",
)
"""Mark of a test that builds and runs the image: skipped without them, failed in CI."""

ROOT = Path(__file__).parent.parent
BASE_IMAGE = "localhost/cadence-base:bookworm"
IMAGE = "localhost/cadence:test"
DEPS_IMAGE = "localhost/cadence-deps:test"
DEBIAN_MIRROR = "http://deb.debian.org/debian"

RUNTIME = ["--runtime", "runc"]
"""crun (podman's default) fails here: "cgroups in hybrid mode not supported"."""
ULIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]
"""Within what this sandbox lets a process set (podman's defaults, 1048576 files and
4194304 processes, are refused: "setrlimit RLIMIT_NOFILE: Operation not permitted")."""


def podman(*args: str, timeout_s: float = 60, check: bool = True) -> str:
    assert PODMAN is not None
    done = subprocess.run(
        [PODMAN, *args], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args[:2])} failed: {done.stderr[-3000:]}")
    return done.stdout


def ensure_base_image(workdir: Path, log: Path) -> None:
    """Debian bookworm with Python 3.11 as ``BASE_IMAGE``, unless it is there already."""
    if _exists(BASE_IMAGE):
        return
    assert DEBOOTSTRAP is not None
    rootfs = workdir / "rootfs"
    with log.open("ab") as output:
        subprocess.run(
            [
                DEBOOTSTRAP,
                "--variant=minbase",
                "--include=python3,python3-venv,ca-certificates",
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            stdout=output,
            stderr=subprocess.STDOUT,
            timeout=900,
            check=True,
        )
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    assert PODMAN is not None
    subprocess.run(
        [PODMAN, "import", "-", BASE_IMAGE], stdin=tar.stdout, capture_output=True, check=True
    )
    assert tar.wait() == 0
    shutil.rmtree(rootfs)


def _exists(image: str) -> bool:
    assert PODMAN is not None
    return subprocess.run([PODMAN, "image", "exists", image], check=False).returncode == 0


def host_pip(workdir: Path) -> list[str]:
    """The ``podman build`` options that give pip in the build this machine's pip setup —
    and, if that setup names an index of its own, torch's index too (else the Containerfile's
    default, PyTorch's CPU index, stays: where it cannot be reached, as here, pip finds the
    CPU wheel in the setup's wheel folder after a few retries)."""
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    settings: dict[str, str] = {}
    for line in listed.splitlines():
        key, _, value = line.partition("=")
        settings[key.rpartition(".")[2]] = value.strip().strip("'\"")
    for name, value in os.environ.items():  # what pip reads from PIP_* variables
        if name.startswith("PIP_"):
            settings[name.removeprefix("PIP_").lower().replace("_", "-")] = value
    config = workdir / "pip.conf"
    config.write_text("[global]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items()))
    mounts = ["-v", f"{config}:/etc/pip.conf:ro"]
    paths = {
        match.rstrip("/")
        for value in settings.values()
        for match in re.findall(r"(?:file://)?(/[^\s'\"]+)", value)
    }
    for path in sorted(paths):
        # A local index (…/simple) links to its files beside it: mount the folder above.
        folder = Path(path).parent if Path(path).name == "simple" else Path(path)
        if folder.exists():
            mounts += ["-v", f"{folder}:{folder}:ro"]
    if (index := settings.get("index-url")) is not None:
        mounts += ["--build-arg", f"TORCH_INDEX={index}"]
    return mounts


def build_image(workdir: Path, log: Path, timeout_s: float) -> None:
    """``deploy/Containerfile`` built as ``IMAGE`` on ``BASE_IMAGE``. The stage with the
    dependencies is tagged ``DEPS_IMAGE`` so that it stays cached (rebuilt only when
    pyproject.toml changes); what earlier builds left untagged is removed after."""
    deadline = time.monotonic() + timeout_s
    for target in (["--target", "deps", "-t", DEPS_IMAGE], ["-t", IMAGE]):
        _build(workdir, log, target, deadline - time.monotonic())
    podman("image", "prune", "--force", timeout_s=300, check=False)  # tidying, best effort


def _build(workdir: Path, log: Path, target: list[str], timeout_s: float) -> None:
    mounts = host_pip(workdir)
    args = [
        "build",
        *RUNTIME,
        *ULIMITS,
        "--network=host",
        *mounts,
        "--build-arg",
        f"BASE_IMAGE={BASE_IMAGE}",
        "-f",
        str(ROOT / "deploy" / "Containerfile"),
        *target,
        str(ROOT),
    ]
    assert PODMAN is not None
    with log.open("ab") as output:
        subprocess.run(
            [PODMAN, *args], stdout=output, stderr=subprocess.STDOUT, timeout=timeout_s, check=True
        )
