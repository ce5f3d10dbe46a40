"""``cadenza worker`` refuses what it cannot run before touching Kafka, with a message and exit 1.

Running pipelines through the CLI (start, SIGKILL, restart, SIGTERM -> exit 0) is covered by
``test_crash_restore_kafka``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

JOIN_MODULE = """
from pydantic import BaseModel
from cadenza.pipelines import Pipeline


class Click(BaseModel):
    user: str


joins = Pipeline("joins", tenant="t", latency_target="1s")
left = joins.source("left", value=Click).key_by(lambda c: c.user)
right = joins.source("right", value=Click).key_by(lambda c: c.user)
left.join(right, within="1s").key_by(lambda pair: pair).sink("pairs")
"""


def worker(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # An address nothing listens on: these commands must fail before connecting anywhere.
    env = {**os.environ, "CADENZA_BOOTSTRAP_SERVERS": "127.0.0.1:9"}
    return subprocess.run(
        [sys.executable, "-m", "cadenza", "worker", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
        check=False,
    )


def test_a_key_by_after_a_join_is_refused_naming_the_pipeline_and_the_step(tmp_path: Path) -> None:
    (tmp_path / "join_pipelines.py").write_text(JOIN_MODULE)
    result = worker("join_pipelines.py", cwd=tmp_path)
    assert result.returncode == 1
    message = " ".join(result.stderr.split())
    assert "pipeline 'joins', step '6-key_by': a key_by after the join '5-join' is not supported" in message
    assert "Traceback" not in result.stderr


def test_dotted_modules_are_found_from_the_working_directory(tmp_path: Path) -> None:
    package = tmp_path / "myapp"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "flows.py").write_text(JOIN_MODULE)
    result = worker("myapp.flows", cwd=tmp_path)
    assert "after the join" in " ".join(result.stderr.split())  # found and compiled, then refused
