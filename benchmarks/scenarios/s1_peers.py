"""The peer systems S1 runs beside cadenza's policies: the command line of each, for
:func:`cadenza.demo.s1.run_benchmark`'s ``peers`` (a :data:`~cadenza.demo.s1_process.PeerCommand`).

A peer runs S1's two pipelines from a venv of its own (``peers/``), reading the run's input topics and
writing its output topics as the cadenza worker does, so it stays in the checkout.
"""

from __future__ import annotations

from pathlib import Path

from cadenza.demo.s1_process import PeerCommand, PeerRun

__all__ = ["PEERS", "faust_command"]

BENCH_DIR = Path(__file__).resolve().parent


def faust_command(run: PeerRun) -> list[str]:
    """The faust-streaming app of S1, run by the interpreter of its own venv (created on first use)."""
    from peers.venvs import FAUST, ensure_peer_env  # noqa: PLC0415

    python = ensure_peer_env(FAUST, progress=lambda line: None)
    (run.workdir / "faust-data").mkdir(parents=True, exist_ok=True)
    return [
        str(python),
        str(BENCH_DIR / "peers" / "faust_s1.py"),
        "--bootstrap",
        run.settings.bootstrap_servers,
        "--ls-input",
        run.topics.ls_in,
        "--ls-output",
        run.topics.ls_out,
        "--ba-input",
        run.topics.ba_in,
        "--ba-output",
        run.topics.ba_out,
        "--cpu-iterations",
        str(run.iterations),
        "--cpu-seconds",
        str(run.cpu_seconds or 0.0),
        "--partitions",
        str(run.partitions),
        "--app-id",
        f"s1-faust-{run.run}",
        "--workdir",
        str(run.workdir),
        "--fetch-max-wait-ms",
        "20",  # as cadenza's worker consumer: a parked fetch on the embedded broker costs the wait
    ]


#: Every peer system S1 can run, by the name ``--systems`` gives it.
PEERS: dict[str, PeerCommand] = {"faust": faust_command}
