from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cadenza.settings import KafkaSettings


@pytest.mark.kafka
def test_demo_smoke_flow_round_trips_every_record(kafka_settings: KafkaSettings, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "CADENZA_HOME": str(tmp_path),
        "CADENZA_BOOTSTRAP_SERVERS": kafka_settings.bootstrap_servers,
        "COLUMNS": "200",
    }
    result = subprocess.run(
        [sys.executable, "-m", "cadenza", "demo", "--smoke", "--records", "2000", "--partitions", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "worker-less round trip" in result.stdout
    assert "smoke flow OK" in result.stdout
    assert "records consumed" in result.stdout and "2000" in result.stdout
