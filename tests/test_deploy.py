"""The deployment on paper (deploy/, docs/deploy.md): every Kubernetes manifest against the
API's own schemas (kubernetes-validate, strict: an unknown field fails), the container file
against hadolint, and the pieces against each other and against Cadence — the configuration
in the ConfigMap loads, and the port, probes, secrets, grace period, metric and LLM address
the manifests name are the ones the server has.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from cadence.pipeline.config import CadenceConfig
from cadence.pipeline.config.loader import load_config
from cadence.web.metrics import ServerMetrics

DEPLOY = Path(__file__).parent.parent / "deploy"
K8S = DEPLOY / "k8s"
KUBERNETES_VERSION = "1.33.0"
"""The oldest Kubernetes the manifests are meant for (the `sleep` preStop action is GA)."""


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    """Every object of deploy/k8s, by kind and name."""
    objects = {}
    for path in sorted(K8S.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            objects[(document["kind"], document["metadata"]["name"])] = document
    return objects


@pytest.mark.parametrize("key", sorted(manifests()), ids=lambda key: f"{key[0]}/{key[1]}")
def test_each_manifest_is_valid_against_the_kubernetes_schemas(key: tuple[str, str]) -> None:
    kubernetes_validate.validate(manifests()[key], KUBERNETES_VERSION, strict=True)


def test_the_schema_check_catches_a_misspelled_field() -> None:
    deployment = manifests()[("Deployment", "cadence")]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["readinesProbe"] = container.pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


def cluster_config(tmp_path: Path) -> CadenceConfig:
    configmap = manifests()[("ConfigMap", "cadence")]
    path = tmp_path / "cadence.yaml"
    path.write_text(configmap["data"]["cadence.yaml"])
    return load_config(path)


def test_the_manifests_agree_with_the_configuration_they_carry(tmp_path: Path) -> None:
    config = cluster_config(tmp_path)
    objects = manifests()
    pod = objects[("Deployment", "cadence")]["spec"]["template"]["spec"]
    (container,) = pod["containers"]

    # The config file is where the image's command reads it.
    mount = next(m for m in container["volumeMounts"] if m["name"] == "config")
    assert container["args"] == ["--config", f"{mount['mountPath']}/cadence.yaml"]
    assert container["args"] == containerfile_instruction("CMD")

    # The port, and the probes on it: alive is /healthz, ready is /readyz.
    (port,) = container["ports"]
    assert (config.server.host, config.server.port) == ("0.0.0.0", port["containerPort"])
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["readinessProbe"]["failureThreshold"] == 1  # full: out of the Service now
    service = objects[("Service", "cadence")]["spec"]
    assert service["ports"][0]["targetPort"] == port["name"]
    assert service["sessionAffinity"] == "None"

    # The pod is given time to drain: the preStop pause, then server.drain_timeout_s.
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert pod["terminationGracePeriodSeconds"] > pause + config.server.drain_timeout_s

    # Every secret the configuration names is in the container's environment.
    names = {env["name"] for env in container["env"]}
    assert config.server.auth_token_env in names
    assert config.telephony.twilio_auth_token_env in names
    assert config.models.llm.openai.api_key_env in names

    # The LLM is the service of llm.yaml, on its port.
    assert config.models.llm.backend == "openai"
    assert config.models.llm.openai.base_url is not None
    address = urlsplit(config.models.llm.openai.base_url)
    llm = objects[("Service", "cadence-llm")]["spec"]["ports"][0]
    assert (address.hostname, address.port) == ("cadence-llm", llm["port"])
    sglang = objects[("Deployment", "cadence-llm")]["spec"]["template"]["spec"]["containers"][0]
    assert f"--served-model-name={config.models.llm.openai.model}" in sglang["args"]


def test_the_autoscaler_follows_a_metric_the_server_exports() -> None:
    objects = manifests()
    rules = yaml.safe_load(objects[("ConfigMap", "cadence-adapter-rules")]["data"]["config.yaml"])
    (rule,) = rules["rules"]
    series = re.match(r"(\w+)\{", rule["seriesQuery"])
    assert series is not None
    exported = ServerMetrics().render().decode()
    assert f"# TYPE {series.group(1)} gauge" in exported
    hpa = objects[("HorizontalPodAutoscaler", "cadence")]["spec"]
    (metric,) = hpa["metrics"]
    assert metric["pods"]["metric"]["name"] == rule["name"]["as"]


def containerfile_instruction(name: str) -> Any:
    """The last ``name`` instruction of deploy/Containerfile, its JSON form parsed."""
    lines = [line for line in (DEPLOY / "Containerfile").read_text().splitlines()]
    last = [line for line in lines if line.startswith(f"{name} ")][-1]
    return yaml.safe_load(last.removeprefix(f"{name} "))


def test_the_container_file_passes_hadolint_and_runs_unprivileged() -> None:
    hadolint = Path(sys.executable).with_name("hadolint")
    checked = subprocess.run(
        [str(hadolint), str(DEPLOY / "Containerfile")], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert containerfile_instruction("USER") not in (0, "0", "root")
    assert containerfile_instruction("ENTRYPOINT") == ["cadence", "serve"]


def test_the_image_installs_what_the_makefile_installs_beside_the_dependencies() -> None:
    # The wheels installed without their dependencies (SmolLM2's GGUF) are not in
    # pyproject.toml's list, which the image installs from: the same pins in both places.
    makefile = (DEPLOY.parent / "Makefile").read_text()
    pins = dict(re.findall(r"^\w+ := ([\w-]+)==(\S+)$", makefile, re.M))
    containerfile = (DEPLOY / "Containerfile").read_text()
    installed = dict(re.findall(r"--no-deps ([\w-]+)==(\S+)", containerfile))
    assert pins, "no pinned wheel in the Makefile"
    assert installed == pins


def runtime_wheel_folders() -> set[str]:
    """The repository folders whose packages the runtime wheel holds: the packages pyproject's
    ``[tool.setuptools.packages.find]`` finds (as the build does), each top-level one a link in
    ``cadence/`` to its folder, and ``cadence/`` itself."""
    import tomllib

    from setuptools import find_packages  # type: ignore[import-untyped]

    root = DEPLOY.parent
    rule = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    find = rule["packages"]["find"]
    packages = find_packages(str(root), include=find["include"], exclude=find["exclude"])
    top = {name.split(".")[1] for name in packages if name.count(".") >= 1}
    assert top, "the wheel has no package"
    return {(root / "cadence" / name).readlink().name for name in top} | {"cadence"}


def image_copy_errors(containerfile: str, dockerignore: str, wheel: set[str]) -> list[str]:
    """What the image's build stage gets wrong of the runtime wheel's folders ``wheel``: a
    folder the Containerfile does not copy or .dockerignore keeps out, or one it copies that
    the wheel does not have."""
    copied = set(re.findall(r"^COPY (\w+) \./\1$", containerfile, re.M))
    sent = set(re.findall(r"^!(\w+)$", dockerignore, re.M))
    errors = []
    if wheel - copied:
        errors.append(f"deploy/Containerfile does not copy {sorted(wheel - copied)}")
    if wheel - sent:
        errors.append(f".dockerignore does not let in {sorted(wheel - sent)}")
    if copied - wheel:
        errors.append(f"deploy/Containerfile copies {sorted(copied - wheel)}, not in the wheel")
    return errors


def test_the_image_copies_every_folder_of_the_runtime_wheel_and_no_other() -> None:
    """The image's wheel is built from what the build stage copies: a folder of the runtime
    left out (``cli/`` once) gives an image whose ``cadence`` cannot start."""
    containerfile = (DEPLOY / "Containerfile").read_text()
    dockerignore = (DEPLOY.parent / ".dockerignore").read_text()
    wheel = runtime_wheel_folders()
    assert {"cli", "report", "llm", "web"} <= wheel
    assert "tooling" not in wheel
    assert image_copy_errors(containerfile, dockerignore, wheel) == []
    # The check names what a Containerfile leaves out (the image that could not start).
    left_out = containerfile.replace("COPY cli ./cli\n", "").replace("COPY report ./report\n", "")
    assert image_copy_errors(left_out, dockerignore, wheel) == [
        "deploy/Containerfile does not copy ['cli', 'report']"
    ]
