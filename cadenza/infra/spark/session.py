"""A local SparkSession that fails with one actionable message instead of a JVM stack trace.

PySpark's own failure modes are poor for a newcomer: without Java it prints "JAVA_HOME is not set"
from a shell script and then raises ``JAVA_GATEWAY_EXITED`` with no cause; with an old Java it dies
on an ``UnsupportedClassVersionError`` buried in the JVM's output. So the prerequisites are checked
in Python *before* the JVM starts (PySpark importable, a Java 17+ found the way ``spark-submit`` finds
it), and if the JVM still fails to start, its own error lines are captured and named in the message.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cadenza.errors import CadenzaError

if TYPE_CHECKING:
    from pyspark.conf import SparkConf
    from pyspark.sql import SparkSession

_log = logging.getLogger("cadenza.spark")

#: Spark 4 is compiled for Java 17; an older JVM cannot load its classes.
MIN_JAVA_MAJOR = 17
JAVA_ADVICE = (
    "install OpenJDK 17 (e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME "
    "to a Java 17+ installation"
)
PYSPARK_ADVICE = "pip install 'cadenza[spark]'"

_VERSION = re.compile(r'version "([^"]+)"')


class SparkUnavailableError(CadenzaError):
    """Spark cannot run here (no PySpark, no or too old Java, or the JVM did not start)."""


@dataclass(frozen=True)
class JavaRuntime:
    """The ``java`` that ``spark-submit`` will run, and its version."""

    executable: str
    version: str
    major: int


def find_java(environ: Mapping[str, str] | None = None) -> JavaRuntime:
    """The Java that Spark will use, checked to be 17 or newer; raise SparkUnavailableError otherwise.

    Mirrors ``spark-submit``'s own lookup (``$JAVA_HOME/bin/java`` if JAVA_HOME is set, else ``java``
    on PATH) so the check judges the same binary the JVM will be started from.
    """
    env = os.environ if environ is None else environ
    java_home = env.get("JAVA_HOME")
    if java_home:
        executable = str(Path(java_home) / "bin" / "java")
        if not os.access(executable, os.X_OK):
            raise SparkUnavailableError(
                f"JAVA_HOME={java_home} but {executable} is missing or not executable; "
                f"Java 17+ is needed for Spark: {JAVA_ADVICE}"
            )
    else:
        found = shutil.which("java", path=env.get("PATH", os.defpath))
        if found is None:
            raise SparkUnavailableError(
                "Java 17+ is needed for Spark; install OpenJDK 17 "
                "(e.g. apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
            )
        executable = found
    version = _java_version(executable, env)
    major = _java_major(version)
    if major is None:
        raise SparkUnavailableError(
            f"could not tell the version of {executable} (it reported {version!r}); "
            f"Java 17+ is needed for Spark: {JAVA_ADVICE}"
        )
    if major < MIN_JAVA_MAJOR:
        raise SparkUnavailableError(
            f"Java {version} found at {executable}, but Spark 4 needs Java 17 or newer: {JAVA_ADVICE}"
        )
    return JavaRuntime(executable=executable, version=version, major=major)


def _java_version(executable: str, env: Mapping[str, str]) -> str:
    try:
        result = subprocess.run(
            [executable, "-version"],
            capture_output=True,
            text=True,
            timeout=30,
            env=dict(env),
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkUnavailableError(
            f"{executable} -version failed ({exc}); Java 17+ is needed for Spark: {JAVA_ADVICE}"
        ) from None
    # `java -version` writes to stderr; some wrappers use stdout.
    output = f"{result.stderr}\n{result.stdout}"
    match = _VERSION.search(output)
    if result.returncode != 0 or match is None:
        first = next((line for line in output.splitlines() if line.strip()), "no output")
        raise SparkUnavailableError(
            f"{executable} -version did not report a version (exit {result.returncode}: {first.strip()}); "
            f"Java 17+ is needed for Spark: {JAVA_ADVICE}"
        )
    return match.group(1)


def _java_major(version: str) -> int | None:
    """17 for "17.0.15", "17" or "17-ea"; 8 for the old "1.8.0_392" scheme."""
    parts = re.findall(r"\d+", version)
    if not parts:
        return None
    if parts[0] == "1" and len(parts) > 1:
        return int(parts[1])
    return int(parts[0])


def require_pyspark() -> None:
    """Raise SparkUnavailableError naming the install command when PySpark is missing."""
    if importlib.util.find_spec("pyspark") is None:
        raise SparkUnavailableError(f"PySpark is not installed; {PYSPARK_ADVICE}")


def spark_session(
    app_name: str,
    master: str = "local[2]",
    *,
    shuffle_partitions: int | None = 2,
    ui: bool = True,
    config: Mapping[str, str] | None = None,
    python: str | None = None,
) -> SparkSession:
    """A SparkSession for ``master`` with cadenza's defaults, or a SparkUnavailableError saying why not.

    ``shuffle_partitions`` defaults small because Spark's 200 turns every tiny micro-batch into 200
    tasks; ``ui=False`` avoids binding a port in tests and CI. ``python`` is the interpreter for
    Spark's Python workers; by default the current one, because Spark otherwise runs ``python3`` from
    PATH, which often lacks cadenza (a virtualenv that is not activated) and fails only at the first
    task. An existing session is returned as is (Spark has one per process).
    """
    require_pyspark()
    from pyspark import SparkContext  # noqa: PLC0415 - optional dependency (the `spark` extra)
    from pyspark.conf import SparkConf  # noqa: PLC0415 - optional dependency
    from pyspark.sql import SparkSession  # noqa: PLC0415 - optional dependency

    existing = SparkSession.getActiveSession()
    if existing is not None:
        return existing

    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # under spark-submit the JVM already runs
        find_java()
    if python is not None:
        os.environ["PYSPARK_PYTHON"] = python
    else:
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    conf = SparkConf(loadDefaults=False).setAppName(app_name).setMaster(master)
    if shuffle_partitions is not None:
        conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if not ui:
        conf.set("spark.ui.enabled", "false")
    for key, value in (config or {}).items():
        conf.set(key, value)

    if SparkContext._gateway is None:
        _start_gateway(conf)
    try:
        return SparkSession.builder.config(conf=conf).getOrCreate()
    except Exception as exc:
        raise SparkUnavailableError(f"Spark did not start: {_java_cause(exc)}") from exc


def _start_gateway(conf: SparkConf) -> None:
    """Start the JVM with its stderr teed, so a start failure can be named, not just "exited".

    PySpark's ``launch_gateway`` raises ``JAVA_GATEWAY_EXITED`` with no cause; the cause (a bad
    ``spark.driver.memory``, an unsupported class version...) is only printed by the JVM. The JVM's
    stderr still reaches ours line by line, and the last lines are kept for the error message.
    """
    from pyspark import SparkContext  # noqa: PLC0415 - optional dependency
    from pyspark.java_gateway import launch_gateway  # noqa: PLC0415 - optional dependency

    read_fd, write_fd = os.pipe()
    tail: deque[str] = deque(maxlen=50)
    pump = threading.Thread(target=_pump, args=(read_fd, tail), name="cadenza-spark-jvm-stderr", daemon=True)
    pump.start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write_fd})  # type: ignore[no-untyped-call]
    except Exception as exc:
        os.close(write_fd)  # the JVM is gone, so the pump now reads to EOF
        pump.join(timeout=5)
        raise SparkUnavailableError(f"Spark's JVM did not start: {_summarize(tail) or exc}") from exc
    os.close(write_fd)  # only the JVM holds the write end from here on
    SparkContext._gateway = gateway
    SparkContext._jvm = gateway.jvm


def _pump(read_fd: int, tail: deque[str]) -> None:
    """Copy the JVM's stderr to fd 2 (where it would have gone) and remember the last lines."""
    with os.fdopen(read_fd, "rb") as reader:
        for line in reader:
            tail.append(line.decode("utf-8", errors="replace").rstrip("\n"))
            with contextlib.suppress(OSError):  # fd 2 is closed at interpreter exit
                os.write(2, line)


def _summarize(lines: deque[str]) -> str:
    """The JVM's error lines (``Error:``, ``Exception``...) or, failing that, its last lines."""
    errors = [
        line.strip().rstrip(".")
        for line in lines
        if re.search(r"error|exception|invalid|could not|unsupported", line, re.IGNORECASE)
        and not line.lstrip().startswith("at ")
    ]
    chosen = errors or [line.strip().rstrip(".") for line in list(lines)[-3:] if line.strip()]
    return "; ".join(dict.fromkeys(chosen))


def _java_cause(exc: BaseException) -> str:
    """The Java exception's own one-line description when ``exc`` wraps one, else ``exc``'s first line."""
    java_exception = getattr(exc, "java_exception", None)
    if java_exception is not None:
        try:
            return str(java_exception.toString())
        except Exception:  # the JVM may be gone; fall back to the Python text
            pass
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
