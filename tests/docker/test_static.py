"""docker/compose.yaml and docker/Dockerfile refer only to what exists in the project (no Docker needed).

Images cannot be built in CI here, so the files are checked by parsing: the compose file is strict
YAML; every image is a pinned official one (Kafka, Prometheus, Grafana) or a target of
docker/Dockerfile; every cadenza command and option (compose ``command:``, Dockerfile
ENTRYPOINT/CMD/HEALTHCHECK) parses with the real typer app, with the service's environment applied
so env-read option values are checked too; every CADENZA_* variable set is a KafkaSettings field or
an option's envvar; every FROM/COPY --from names a stage that exists; every worker module exists and
declares pipelines.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml

from cadenza.cli.app import app
from cadenza.cli.console import LOG_FORMAT_ENV
from cadenza.pipelines import load_pipelines
from cadenza.settings import KafkaSettings
from tests.docker import dockerfile

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
OFFICIAL_KAFKA = "apache/kafka"
PULLED_IMAGES = (OFFICIAL_KAFKA, "prom/prometheus", "grafana/grafana")  # official images, pinned
PYTHON_BASE = "python:3.11-slim"
FINAL_STAGES = ("worker", "spark")
MERGE_TAG = "tag:yaml.org,2002:merge"


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (PyYAML keeps the last one silently; compose errors)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def load_compose() -> dict[str, Any]:
    with COMPOSE.open() as handle:
        document = yaml.load(handle, Loader=StrictLoader)  # StrictLoader is a SafeLoader
    assert isinstance(document, dict)
    return document


COMPOSE_DOC = load_compose()
SERVICES: dict[str, dict[str, Any]] = COMPOSE_DOC["services"]
DOCKER = dockerfile.parse(DOCKERFILE)
CADENZA_SERVICES = sorted(name for name, service in SERVICES.items() if "build" in service)


def cli_root() -> Any:
    return typer.main.get_command(app)


def option_envvars(command: Any) -> set[str]:
    """Every envvar declared by an option of the CLI tree below ``command``."""
    found: set[str] = set()
    for param in command.params:
        envvar = getattr(param, "envvar", None)
        if isinstance(envvar, str):
            found.add(envvar)
        elif envvar:
            found.update(envvar)
    for sub in getattr(command, "commands", {}).values():
        found |= option_envvars(sub)
    return found


KAFKA_SETTINGS_ENV = {f"CADENZA_{name.upper()}" for name in KafkaSettings.model_fields}
# LOG_FORMAT_ENV is read by every command's logging set-up, not by one option.
KNOWN_ENV = KAFKA_SETTINGS_ENV | option_envvars(cli_root()) | {LOG_FORMAT_ENV}


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """Exactly ``values`` as the CADENZA_* environment (the developer's own ones hidden)."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("CADENZA_")}
    for key in saved:
        del os.environ[key]
    os.environ.update(values)
    try:
        yield
    finally:
        for key in values:
            os.environ.pop(key, None)
        os.environ.update(saved)


def parse_cli(args: list[str]) -> list[str]:
    """Parse ``cadenza ARGS`` with the real typer app without running it; return the command path.

    Raises the CLI's own usage errors (no such command, no such option, bad value, missing value).
    ``--help`` exists on every command; it is checked by position and dropped, since parsing it
    would print help and exit.
    """
    words = [w for w in args if w != "--help"]
    command = cli_root()
    path = ["cadenza"]
    if not words:
        return path  # `cadenza --help`
    try:
        context = command.make_context("cadenza", words)
        while hasattr(command, "commands"):
            rest = [*context._protected_args, *context.args]
            if not rest:
                break
            name, sub, rest = command.resolve_command(context, rest)
            assert sub is not None and name is not None
            command, context = sub, sub.make_context(name, rest, parent=context)
            path.append(name)
    except Exception as exc:
        message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        raise AssertionError(f"`{' '.join(['cadenza', *args])}` does not parse: {message}") from None
    return path


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    assert isinstance(env, dict), "use the mapping form of environment: (checked key by key)"
    return {str(k): str(v) for k, v in env.items()}


def image_env(target: str) -> dict[str, str]:
    return {k: v for k, v in DOCKER.env(target).items() if k.startswith("CADENZA_")}


# -- compose --------------------------------------------------------------------------------------------


def test_compose_has_kafka_two_workers_stats_a_load_generator_and_the_dashboard() -> None:
    commands = {name: (SERVICES[name].get("command") or [None])[0] for name in CADENZA_SERVICES}
    assert sorted(commands.values()) == ["dashboard", "generate", "stats", "worker"]
    worker = next(SERVICES[name] for name, first in commands.items() if first == "worker")
    assert worker["deploy"]["replicas"] == 2
    assert service_env(worker)["CADENZA_GROUP"], "the replicas must share one consumer group"
    assert any(str(s.get("image", "")).startswith(OFFICIAL_KAFKA + ":") for s in SERVICES.values())


def test_every_image_is_official_kafka_or_a_target_of_our_dockerfile() -> None:
    stages = {stage.name for stage in DOCKER.stages}
    for name, service in SERVICES.items():
        if "build" in service:
            build = service["build"]
            assert (COMPOSE.parent / build["context"]).resolve() == ROOT, name
            assert (ROOT / build["dockerfile"]).resolve() == DOCKERFILE, name
            assert build["target"] in stages, f"{name}: no stage {build['target']!r} in {sorted(stages)}"
            assert "image" not in service, f"{name}: a built service must not also name an image to pull"
            assert "entrypoint" not in service, f"{name}: the image's `cadenza` entrypoint is assumed"
        else:
            image = str(service.get("image", ""))
            repository, _, tag = image.partition(":")
            assert repository in PULLED_IMAGES, (
                f"{name}: {image!r} is not built here nor one of {PULLED_IMAGES}"
            )
            assert tag and tag != "latest", f"{name}: pin the image version"


def test_kafka_runs_kraft_single_node_reachable_by_the_services() -> None:
    kafka_name, kafka = next(
        (n, s) for n, s in SERVICES.items() if str(s.get("image", "")).startswith(OFFICIAL_KAFKA + ":")
    )
    env = service_env(kafka)
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    node = env["KAFKA_NODE_ID"]
    assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].startswith(f"{node}@{kafka_name}:")
    assert "KAFKA_ZOOKEEPER_CONNECT" not in env
    assert int(env["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"]) == 1  # one broker
    advertised = {entry.split("://", 1)[1] for entry in env["KAFKA_ADVERTISED_LISTENERS"].split(",")}
    listener_names = {entry.split("://", 1)[0] for entry in env["KAFKA_LISTENERS"].split(",")}
    protocol_map = dict(entry.split(":") for entry in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(","))
    assert listener_names <= set(protocol_map), "every listener needs a security protocol"
    assert env["KAFKA_CONTROLLER_LISTENER_NAMES"] in listener_names
    for name in CADENZA_SERVICES:
        bootstrap = service_env(SERVICES[name]).get("CADENZA_BOOTSTRAP_SERVERS", "")
        assert bootstrap in advertised, f"{name}: {bootstrap!r} is not an advertised listener {advertised}"
        assert SERVICES[name]["depends_on"][kafka_name]["condition"] == "service_healthy"


def test_named_volumes_are_declared_and_used() -> None:
    declared = set(COMPOSE_DOC.get("volumes") or {})
    used = {
        str(mount).split(":", 1)[0]
        for service in SERVICES.values()
        for mount in service.get("volumes", [])
        if not str(mount).startswith((".", "/"))
    }
    assert used, "state (Kafka data, Spark checkpoints) belongs in named volumes"
    assert used == declared


@pytest.mark.parametrize("name", CADENZA_SERVICES)
def test_service_command_exists_in_the_cli(name: str) -> None:
    service = SERVICES[name]
    command = service.get("command")
    assert isinstance(command, list) and all(isinstance(w, str) for w in command), (
        f"{name}: write command: as a list of strings (no shell, no quoting surprises)"
    )
    env = {**image_env(service["build"]["target"]), **service_env(service)}
    with environment(env):
        path = parse_cli(command)
    assert len(path) > 1, f"{name}: {command} names no cadenza command"


@pytest.mark.parametrize("name", CADENZA_SERVICES)
def test_service_cadenza_variables_exist(name: str) -> None:
    env = service_env(SERVICES[name])
    unknown = sorted(key for key in env if key.startswith("CADENZA_") and key not in KNOWN_ENV)
    assert not unknown, f"{name}: {unknown} are neither KafkaSettings fields nor CLI option envvars"
    with environment({k: v for k, v in env.items() if k.startswith("CADENZA_")}):
        KafkaSettings.load()  # the values validate, not only the names


@pytest.mark.parametrize("name", [n for n in CADENZA_SERVICES if SERVICES[n]["command"][0] == "worker"])
def test_worker_modules_are_in_the_image_and_declare_pipelines(name: str) -> None:
    command = SERVICES[name]["command"]
    copied = {
        words[-1].removeprefix("./").rstrip("/")
        for stage in DOCKER.lineage(SERVICES[name]["build"]["target"])
        for instruction in stage.all("COPY")
        if not (words := instruction.arguments.split())[0].startswith("--from")
    }
    modules = [word for word in command[1:] if not word.startswith("-")]
    assert modules
    for module in modules:
        assert module.split("/", 1)[0] in copied, f"{module} is not copied into the image ({copied})"
        assert load_pipelines(str(ROOT / module)), f"{module} declares no pipeline"


# -- Dockerfile ---------------------------------------------------------------------------------------


def test_dockerfile_stages_and_references_exist() -> None:
    names = [stage.name for stage in DOCKER.stages]
    assert len(names) == len(set(names)), f"duplicate stage names: {names}"
    for index, stage in enumerate(DOCKER.stages):
        earlier = set(names[:index])
        if stage.base not in earlier:
            image = dockerfile.expand(stage.base, DOCKER.global_args)
            assert image.startswith(PYTHON_BASE), f"stage {stage.name}: base {image!r} is not {PYTHON_BASE}*"
        for instruction in stage.all("COPY"):
            for word in instruction.arguments.split():
                if word.startswith("--from="):
                    source = word.removeprefix("--from=")
                    assert source in earlier, f"line {instruction.line}: no earlier stage {source!r}"
    for target in FINAL_STAGES:
        assert target in names


def test_dockerfile_cadenza_variables_exist() -> None:
    set_in = {
        key: instruction.line
        for stage in DOCKER.stages
        for instruction in stage.all("ENV")
        for key in dockerfile.parse_env(instruction.arguments)
        if key.startswith("CADENZA_")
    }
    assert set_in, "the images configure cadenza through CADENZA_* variables"
    unknown = {key: line for key, line in set_in.items() if key not in KNOWN_ENV}
    assert not unknown, f"ENV {unknown} (name: line) are neither KafkaSettings fields nor CLI option envvars"
    for target in FINAL_STAGES:
        with environment(image_env(target)):
            KafkaSettings.load()  # the values validate, not only the names


@pytest.mark.parametrize("target", FINAL_STAGES)
def test_final_stages_run_cadenza_as_a_non_root_user(target: str) -> None:
    user = DOCKER.last(target, "USER")
    assert user is not None and user.arguments not in ("root", "0"), f"{target} runs as root"
    entrypoint = DOCKER.last(target, "ENTRYPOINT")
    assert entrypoint is not None
    assert dockerfile.command_words(entrypoint.arguments, {}) == ["cadenza"]
    cmd = DOCKER.last(target, "CMD")
    assert cmd is not None
    with environment(image_env(target)):
        assert len(parse_cli(dockerfile.command_words(cmd.arguments, DOCKER.env(target)))) >= 1


def test_worker_healthcheck_runs_an_existing_cadenza_command() -> None:
    check = DOCKER.last("worker", "HEALTHCHECK")
    assert check is not None, "the worker image needs a HEALTHCHECK"
    env = DOCKER.env("worker")
    words = dockerfile.command_words(dockerfile.healthcheck_command(check.arguments), env)
    assert words[0] == "cadenza"
    with environment(image_env("worker")):
        assert parse_cli(words[1:]) == ["cadenza", "health"]


def test_images_install_no_embedded_broker_and_spark_only_in_the_spark_image() -> None:
    def installs(target: str) -> str:
        runs = [i.arguments for stage in DOCKER.lineage(target) for i in stage.all("RUN")]
        return " ".join(run for run in runs if "pip install" in run)

    copied_from = {
        target: {
            word.removeprefix("--from=")
            for stage in DOCKER.lineage(target)
            for i in stage.all("COPY")
            for word in i.arguments.split()
            if word.startswith("--from=")
        }
        for target in FINAL_STAGES
    }
    worker_installs = " ".join(installs(source) for source in copied_from["worker"])
    spark_installs = " ".join(installs(source) for source in copied_from["spark"])
    assert "broker" not in worker_installs and "calfkit" not in worker_installs
    assert "spark" not in worker_installs
    assert "[spark" in spark_installs
    assert any("openjdk-17" in i.arguments for s in DOCKER.lineage("spark") for i in s.all("RUN"))


def test_dockerignore_keeps_what_the_images_copy() -> None:
    lines = [line.strip() for line in DOCKERIGNORE.read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]

    def excluded(path: str) -> bool:
        result = False
        for pattern in patterns:
            negate = pattern.startswith("!")
            bare = pattern.removeprefix("!").rstrip("/")
            if fnmatch.fnmatch(path, bare) or path.startswith(bare + "/"):
                result = not negate
        return result

    for stage in DOCKER.stages:
        for instruction in stage.all("COPY"):
            words = [w for w in instruction.arguments.split() if not w.startswith("--")]
            if any(w.startswith("--from=") for w in instruction.arguments.split()):
                continue
            for source in words[:-1]:
                assert (ROOT / source).exists(), f"line {instruction.line}: {source} does not exist"
                where = f"line {instruction.line}"
                assert not excluded(source.rstrip("/")), f"{where}: .dockerignore drops {source}"
