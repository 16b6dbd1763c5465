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
* **The Deployment played** (``podman kube play``, Debian's podman 4.3): what that podman does
  not read of the manifests is given to it the way it can take it — the Secret as a podman
  secret of the same name (a JSON object of base64 values: 4.3 stores a ``kind: Secret``
  document but cannot read it back), the pod's grace period
  (``terminationGracePeriodSeconds``, which 4.3 ignores: its stop timeout stays 10 s) as
  ``engine.stop_timeout`` of a ``containers.conf``, with the ulimits as its
  ``default_ulimits`` (``kube play`` has no ``--ulimit``). The manifests themselves change
  only where one machine differs from a cluster: the image built here, one replica (each
  replica is a pod on the one host, and two cannot hold one host port), and a ``hostPort``
  on the loopback address to reach it (:func:`played_manifests`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
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


def podman(
    *args: str, timeout_s: float = 60, check: bool = True, env: dict[str, str] | None = None
) -> str:
    assert PODMAN is not None
    done = subprocess.run(
        [PODMAN, *args], capture_output=True, text=True, timeout=timeout_s, check=False, env=env
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


def podman_logs(container: str) -> str:
    """What ``container`` printed, both streams (the server logs to standard error)."""
    assert PODMAN is not None
    done = subprocess.run(
        [PODMAN, "logs", container], capture_output=True, text=True, timeout=60, check=False
    )
    return done.stdout + done.stderr


def played_manifests(folder: Path, image: str, port: int) -> tuple[Path, int]:
    """deploy/k8s's ConfigMap and Deployment as one file for ``podman kube play`` (changed only
    as the module says: ``image``, one replica, ``127.0.0.1:port`` as the pod's host port), and
    the Deployment's grace period."""
    k8s = ROOT / "deploy" / "k8s"
    configmap = yaml.safe_load((k8s / "configmap.yaml").read_text())
    deployment = yaml.safe_load((k8s / "deployment.yaml").read_text())
    deployment["spec"]["replicas"] = 1
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    container["image"] = image
    [http] = container["ports"]
    http |= {"hostPort": port, "hostIP": "127.0.0.1"}
    path = folder / "cadence-k8s.yaml"
    path.write_text(yaml.safe_dump_all([configmap, deployment]))
    return path, int(pod["terminationGracePeriodSeconds"])


def podman_secret(name: str, values: dict[str, str], folder: Path) -> None:
    """The Kubernetes Secret ``name`` with ``values``, as podman 4.3's ``kube play`` reads one
    (see the module); one left by an earlier run is replaced."""
    podman("secret", "rm", name, check=False)
    path = folder / f"{name}.json"
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in values.items()}
    path.write_text(json.dumps(encoded))
    path.chmod(0o600)
    podman("secret", "create", name, str(path))
    path.unlink()


def kube_conf(folder: Path, grace_s: int) -> dict[str, str]:
    """The environment for ``podman kube play`` with a ``containers.conf`` giving the pod's
    grace period and this sandbox's ulimits (see the module)."""
    limits = ", ".join(f'"{limit}"' for limit in ULIMITS[1::2])
    conf = folder / "containers.conf"
    conf.write_text(
        f"[containers]\ndefault_ulimits = [{limits}]\n\n[engine]\nstop_timeout = {grace_s}\n"
    )
    return {**os.environ, "CONTAINERS_CONF": str(conf)}
