"""docker/k8s/ refers only to what exists and its pieces agree with each other (no cluster needed).

Checked by parsing: every container's ``cadenza`` arguments parse with the real typer app under the
container's environment; every CADENZA_* variable is a setting or option the code reads; the HPA
scales the worker Deployment on the metric the controller exports, within the controller's bounds;
the controller finds the workers through the headless Service on the port they serve metrics on;
the workers' rate window is the controller's interval; worker modules exist and declare pipelines.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from cadenza.infra.metrics import names
from cadenza.pipelines import load_pipelines
from cadenza.scaling.controller import ControllerSettings
from tests.docker.test_static import KNOWN_ENV, StrictLoader, environment, parse_cli

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "docker" / "k8s"
# Read by cadenza/worker/tuning/rates.py and the controller's settings rather than by a CLI option.
EXTRA_ENV = {"CADENZA_RATE_WINDOW_S"} | {f"CADENZA_POOL_{f.upper()}" for f in ControllerSettings.model_fields}


def documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(K8S.glob("*.yaml")):
        docs.extend(d for d in yaml.load_all(path.read_text(encoding="utf-8"), Loader=StrictLoader) if d)
    return docs


def find(kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in documents() if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind} {name!r}, found {len(matches)}"
    return matches[0]


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    [only] = deployment["spec"]["template"]["spec"]["containers"]
    return dict(only)


def env_of(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: str(e["value"]) for e in c.get("env", []) if "value" in e}  # not valueFrom


def option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_manifests_are_a_worker_deployment_a_controller_and_an_hpa() -> None:
    kinds = sorted((d["kind"], d["metadata"]["name"]) for d in documents())
    assert kinds == [
        ("Deployment", "cadenza-pool-controller"),
        ("Deployment", "cadenza-worker"),
        ("HorizontalPodAutoscaler", "cadenza-worker"),
        ("Service", "cadenza-pool-controller"),
        ("Service", "cadenza-workers"),
    ]
    for d in documents():
        if d["kind"] == "Deployment":
            labels = d["spec"]["template"]["metadata"]["labels"]
            assert d["spec"]["selector"]["matchLabels"].items() <= labels.items()


def test_every_command_parses_under_its_environment_and_every_variable_is_read() -> None:
    expected = {"cadenza-worker": ["cadenza", "worker"], "cadenza-pool-controller": ["cadenza", "pool"]}
    for name, path in expected.items():
        c = container(find("Deployment", name))
        env = env_of(c)
        names = {e["name"] for e in c.get("env", [])}  # valueFrom ones too
        unknown = sorted(k for k in names if k.startswith("CADENZA_") and k not in KNOWN_ENV | EXTRA_ENV)
        assert not unknown, f"{name} sets variables nothing reads: {unknown}"
        with environment(env):
            assert parse_cli(c["args"]) == path
        for module in c["args"][1:]:
            if module.endswith(".py"):
                assert load_pipelines(ROOT / module), module


def test_the_hpa_applies_the_controllers_decision_to_the_workers() -> None:
    hpa = find("HorizontalPodAutoscaler", "cadenza-worker")["spec"]
    worker = find("Deployment", "cadenza-worker")
    assert hpa["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "cadenza-worker"}
    [metric] = hpa["metrics"]
    assert metric["type"] == "External"
    assert metric["external"]["metric"]["name"] == names.POOL_DESIRED_WORKERS.name
    # replicas = ceil(value / averageValue): with 1, exactly the desired count
    assert metric["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    args = container(find("Deployment", "cadenza-pool-controller"))["args"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (
        int(option(args, "--min")),
        int(option(args, "--max")),
    )
    assert worker["spec"]["replicas"] == hpa["minReplicas"]


def test_the_controller_observes_every_worker_with_matching_windows() -> None:
    worker = container(find("Deployment", "cadenza-worker"))
    controller = container(find("Deployment", "cadenza-pool-controller"))
    service = find("Service", "cadenza-workers")["spec"]
    args = controller["args"]
    host, port = option(args, "--worker-service").rsplit(":", 1)
    assert host == "cadenza-workers" and service["clusterIP"] == "None"
    labels = find("Deployment", "cadenza-worker")["spec"]["template"]["metadata"]["labels"]
    assert service["selector"].items() <= labels.items()
    worker_env = env_of(worker)
    assert int(port) == service["ports"][0]["port"] == int(worker_env["CADENZA_METRICS_PORT"])
    assert worker_env["CADENZA_METRICS_HOST"] == "0.0.0.0"
    assert float(worker_env["CADENZA_RATE_WINDOW_S"]) == float(option(args, "--interval"))
    assert env_of(controller)["CADENZA_GROUP"] == worker_env["CADENZA_GROUP"]
    assert worker["args"][1:] == args[1 : len(worker["args"])]  # the same pipelines
