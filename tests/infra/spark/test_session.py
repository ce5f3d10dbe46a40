"""Spark's prerequisites are checked before the JVM starts, and failures say what to install.

The Java checks run real processes: fake ``java`` scripts in tmp_path that print a given version, put
on PATH or under JAVA_HOME. The end-to-end failures run ``spark_session`` in a fresh interpreter,
because this test process may already hold the shared JVM.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cadenza.infra.spark import SparkUnavailableError, find_java

NO_JAVA = (
    "Java 17+ is needed for Spark; install OpenJDK 17 (e.g. apt-get install openjdk-17-jre-headless) "
    "or set JAVA_HOME"
)


def fake_java(home: Path, version_line: str, exit_code: int = 0) -> Path:
    """A ``java`` that prints ``version_line`` on stderr like ``java -version`` does."""
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True)
    java = bin_dir / "java"
    java.write_text(
        f"#!/bin/sh\necho '{version_line}' >&2\necho 'OpenJDK Runtime Environment' >&2\nexit {exit_code}\n"
    )
    java.chmod(0o755)
    return java


def test_no_java_on_path_and_no_java_home(tmp_path: Path) -> None:
    with pytest.raises(SparkUnavailableError) as caught:
        find_java({"PATH": str(tmp_path)})
    assert str(caught.value) == NO_JAVA


@pytest.mark.parametrize(
    ("line", "version"),
    [('openjdk version "11.0.2" 2019-01-15', "11.0.2"), ('java version "1.8.0_392"', "1.8.0_392")],
)
def test_java_older_than_17_names_the_version_and_the_fix(tmp_path: Path, line: str, version: str) -> None:
    java = fake_java(tmp_path / "jdk", line)
    with pytest.raises(SparkUnavailableError) as caught:
        find_java({"PATH": str(java.parent)})
    message = str(caught.value)
    assert f"Java {version} found at {java}" in message
    assert "needs Java 17 or newer" in message
    assert "apt-get install openjdk-17-jre-headless" in message


@pytest.mark.parametrize(
    ("line", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('openjdk version "22-ea"', 22),
    ],
)
def test_java_17_or_newer_is_accepted(tmp_path: Path, line: str, major: int) -> None:
    java = fake_java(tmp_path / "jdk", line)
    runtime = find_java({"PATH": str(java.parent)})
    assert (runtime.executable, runtime.major) == (str(java), major)


def test_java_home_wins_over_path_like_spark_submit(tmp_path: Path) -> None:
    on_path = fake_java(tmp_path / "path-jdk", 'openjdk version "17.0.1"')
    home = tmp_path / "old-jdk"
    fake_java(home, 'openjdk version "11.0.22"')
    with pytest.raises(SparkUnavailableError, match=r"Java 11\.0\.22 found at .*old-jdk/bin/java"):
        find_java({"PATH": str(on_path.parent), "JAVA_HOME": str(home)})


def test_java_home_without_a_java(tmp_path: Path) -> None:
    with pytest.raises(SparkUnavailableError, match=r"JAVA_HOME=.* but .*/bin/java is missing"):
        find_java({"PATH": "", "JAVA_HOME": str(tmp_path)})


def test_a_java_that_does_not_report_a_version(tmp_path: Path) -> None:
    java = fake_java(tmp_path / "jdk", "Segmentation fault", exit_code=139)
    with pytest.raises(
        SparkUnavailableError, match=r"did not report a version \(exit 139: Segmentation fault\)"
    ):
        find_java({"PATH": str(java.parent)})


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )


SESSION = """
from cadenza.infra.spark import SparkUnavailableError, spark_session
try:
    spark_session("t", config=CONFIG)
except SparkUnavailableError as exc:
    print("REFUSED:", exc)
else:
    print("STARTED")
"""


def clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JAVA_HOME", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET")
    }
    env.update(extra)
    return env


def test_spark_session_refuses_before_starting_a_jvm_without_java(tmp_path: Path) -> None:
    result = run_python(SESSION.replace("CONFIG", "None"), clean_env(PATH=str(tmp_path)))
    assert result.stdout.strip() == f"REFUSED: {NO_JAVA}", result.stderr


def test_spark_session_without_pyspark_names_the_extra() -> None:
    code = "import sys; sys.modules['pyspark'] = None\n" + SESSION.replace("CONFIG", "None")
    result = run_python(code, clean_env())
    assert result.stdout.strip() == "REFUSED: PySpark is not installed; pip install 'cadenza[spark]'", (
        result.stderr
    )


def test_a_jvm_that_fails_to_start_is_named_in_one_message() -> None:
    pytest.importorskip("pyspark")
    result = run_python(SESSION.replace("CONFIG", "{'spark.driver.memory': 'lots'}"), clean_env())
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    assert lines[0].startswith("REFUSED: Spark's JVM did not start: Invalid maximum heap size: -Xmxlots"), (
        result.stderr
    )
