"""The wheel is complete: built from the project and installed on its own, it runs the demo and describe.

The wheel is built from a copy of the project (so the checkout gets no ``build/`` or ``egg-info``) by
``pip wheel --no-deps``, whose isolated build environment fetches setuptools from PyPI (or pip's
cache). It is then installed with ``--no-deps`` into a fresh ``python -m venv``; instead of
installing cadenza's dependencies from PyPI again (slow, and a network the test should not need
twice), the venv reaches the shared environment's site-packages through a ``.pth`` file appended
after its own. That directory holds an editable cadenza too, but a path listed in a ``.pth`` file is
only appended to ``sys.path`` (its own ``.pth`` hooks do not run) and comes after the venv's
site-packages, so ``cadenza`` resolves to the wheel: the test checks that, then runs the installed
``cadenza`` script from a directory outside the checkout with no ``PYTHONPATH``. What this proves is
that nothing the commands need is missing from the wheel (modules, the demo harness, schemas, the
dashboard's static files, ``py.typed``); the dependencies themselves come from the shared venv.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cadenza.settings import KafkaSettings

ROOT = Path(__file__).resolve().parents[1]


def _run(command: list[str], *, cwd: Path, env: dict[str, str], timeout: float) -> str:
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _package_files(package: Path) -> set[str]:
    return {
        path.relative_to(package.parent).as_posix()
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, set[str]]]:
    """(the fresh venv, the built wheel, the package's files in the source it was built from)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(ROOT / "cadenza", source / "cadenza", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    dist = tmp / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(source)],
        cwd=tmp,
        env=env,
        timeout=300,
    )
    (wheel,) = dist.glob("cadenza-*.whl")
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp, env=env, timeout=120)
    python = venv / "bin" / "python"
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--quiet", str(wheel)],
        cwd=tmp,
        env=env,
        timeout=300,
    )
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            cwd=tmp,
            env=env,
            timeout=60,
        ).strip()
    )
    (site / "zz_shared_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    yield venv, wheel, _package_files(source / "cadenza")


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("CADENZA_")}
    return {**env, "CADENZA_HOME": str(tmp_path / "home"), "COLUMNS": "200", **extra}


def test_the_wheel_holds_every_file_of_the_package(installed: tuple[Path, Path, set[str]]) -> None:
    _venv, wheel, expected = installed
    with zipfile.ZipFile(wheel) as archive:
        shipped = {name for name in archive.namelist() if name.startswith("cadenza/")}
    assert expected - shipped == set(), "files of the package missing from the wheel"
    for needed in (
        "cadenza/py.typed",
        "cadenza/schemas/spans.avsc",
        "cadenza/dashboard/static/dashboard.js",
        "cadenza/demo/s1.py",
        "cadenza/demo/s1_pipelines.py",
    ):
        assert needed in shipped


def test_the_installed_cadenza_is_the_wheel_not_the_checkout(
    installed: tuple[Path, Path, set[str]], tmp_path: Path
) -> None:
    venv, _wheel, _files = installed
    where = _run(
        [str(venv / "bin" / "python"), "-c", "import cadenza.demo.s1 as m; print(m.__file__)"],
        cwd=tmp_path,
        env=_env(tmp_path),
        timeout=60,
    ).strip()
    assert Path(where).is_relative_to(venv), where


def test_installed_describe_runs_on_an_example_and_on_the_demo_pipelines(
    installed: tuple[Path, Path, set[str]], tmp_path: Path
) -> None:
    venv, _wheel, _files = installed
    cadenza = str(venv / "bin" / "cadenza")
    example = tmp_path / "clicks_per_user.py"
    shutil.copy2(ROOT / "examples" / "clicks_per_user.py", example)
    out = _run([cadenza, "describe", str(example)], cwd=tmp_path, env=_env(tmp_path), timeout=120)
    assert "pipeline clicks-per-user" in out and "count over tumbling 1s" in out
    demo = _run(
        [cadenza, "describe", "cadenza.demo.s1_pipelines"], cwd=tmp_path, env=_env(tmp_path), timeout=120
    )
    assert "s1-ls-local" in demo and "s1-ba-local" in demo


@pytest.mark.kafka
def test_installed_demo_smoke_round_trips_through_the_broker(
    installed: tuple[Path, Path, set[str]], kafka_settings: KafkaSettings, tmp_path: Path
) -> None:
    venv, _wheel, _files = installed
    env = _env(tmp_path, CADENZA_BOOTSTRAP_SERVERS=kafka_settings.bootstrap_servers)
    out = _run(
        [str(venv / "bin" / "cadenza"), "demo", "--smoke", "--records", "500", "--partitions", "2"],
        cwd=tmp_path,
        env=env,
        timeout=180,
    )
    assert "smoke flow OK" in out
