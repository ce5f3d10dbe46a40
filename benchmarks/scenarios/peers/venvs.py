"""Virtual environments for peer systems whose pinned dependencies clash with cadenza's.

faust-streaming and quixstreams pin versions of aiokafka, confluent-kafka, pydantic and friends that
cadenza's own environment must not be bent to, so each peer gets a venv of its own, made from the same
interpreter that runs the benchmark (so "same Python" holds) the first time it is needed, and reused
afterwards. The cache lives outside the repository (``$CADENZA_BENCH_VENVS``, else
``$CADENZA_HOME/bench-venvs``, else ``~/.cadenza/bench-venvs``) so a ``git clean`` or a fresh clone does
not throw away minutes of installing. A marker file written only after a successful install records
the pins and the interpreter; a venv whose marker is missing or different is rebuilt from scratch, so
a half-finished install (interrupted, or failed) is never mistaken for a good one. A file lock keeps two
benchmarks started at once from building the same venv twice.
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FAUST",
    "PEERS",
    "QUIXSTREAMS",
    "PeerEnv",
    "PeerInstallError",
    "default_cache_dir",
    "ensure_peer_env",
]

MARKER = "cadenza-peer.json"
#: Lines of pip output quoted when an install fails.
TAIL_LINES = 25


class PeerInstallError(RuntimeError):
    """A peer's virtual environment could not be created or its pinned packages not installed."""


@dataclass(frozen=True)
class PeerEnv:
    """A peer system and the exact packages its venv holds."""

    name: str
    pins: tuple[str, ...]
    #: A module whose import proves the install worked.
    probe: str

    def marker(self) -> dict[str, object]:
        """What must match for an existing venv to be reused."""
        return {
            "peer": self.name,
            "pins": list(self.pins),
            "python": sys.version.split()[0],
            "base_executable": os.path.realpath(getattr(sys, "_base_executable", sys.executable)),
        }


FAUST = PeerEnv("faust", ("faust-streaming==0.15.3",), probe="faust")
QUIXSTREAMS = PeerEnv("quixstreams", ("quixstreams==3.28.1",), probe="quixstreams")
PEERS = {peer.name: peer for peer in (FAUST, QUIXSTREAMS)}


def default_cache_dir() -> Path:
    """Where peer venvs live: outside the repository, so they survive a clean checkout."""
    explicit = os.environ.get("CADENZA_BENCH_VENVS")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("CADENZA_HOME")
    base = Path(home).expanduser() if home else Path.home() / ".cadenza"
    return base / "bench-venvs"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def is_current(venv: Path, peer: PeerEnv) -> bool:
    """True if ``venv`` was completely installed with exactly ``peer``'s pins by this interpreter."""
    try:
        recorded = json.loads((venv / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return bool(recorded == peer.marker() and venv_python(venv).exists())


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run_streaming(command: list[str], peer: PeerEnv, step: str, progress: Callable[[str], None]) -> None:
    """Run ``command``, passing each output line to ``progress``; on failure quote the output's tail."""
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    try:
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL
        )
    except OSError as exc:
        raise PeerInstallError(f"{peer.name}: could not run {command[0]} to {step}: {exc}") from exc
    assert process.stdout is not None
    for raw in process.stdout:
        line = raw.rstrip()
        if line:
            tail.append(line)
            progress(line)
    code = process.wait()
    if code != 0:
        quoted = "\n".join(f"    {line}" for line in tail) or "    (no output)"
        raise PeerInstallError(
            f"could not {step} for peer {peer.name!r} ({' '.join(peer.pins)}): exit code {code}. "
            f"Last lines of the output:\n{quoted}\nPyPI must be reachable (a proxy via PIP_INDEX_URL works)."
        )


def ensure_peer_env(
    peer: PeerEnv,
    *,
    cache_dir: Path | None = None,
    progress: Callable[[str], None] = print,
) -> Path:
    """The python executable of ``peer``'s venv, creating and installing the venv if needed.

    ``progress`` gets one line per step and per line of pip output, so a first run that spends a
    minute installing shows what it is doing.
    """
    root = cache_dir if cache_dir is not None else default_cache_dir()
    venv = root / peer.name
    with _locked(root / f".{peer.name}.lock"):
        if is_current(venv, peer):
            return venv_python(venv)
        progress(f"[{peer.name}] creating a venv at {venv} for {' '.join(peer.pins)} (once; reused later)")
        if venv.exists():
            shutil.rmtree(venv)
        _run_streaming([sys.executable, "-m", "venv", str(venv)], peer, "create the venv", progress)
        python = str(venv_python(venv))
        pip = [python, "-m", "pip", "--disable-pip-version-check", "--no-input"]
        _run_streaming(
            [*pip, "install", "--progress-bar", "off", *peer.pins],
            peer,
            "install the pinned packages",
            progress,
        )
        _run_streaming([python, "-c", f"import {peer.probe}"], peer, f"import {peer.probe}", progress)
        (venv / MARKER).write_text(json.dumps(peer.marker(), indent=2) + "\n")
        progress(f"[{peer.name}] ready")
        return venv_python(venv)


def main() -> None:
    """``python benchmarks/scenarios/peers/venvs.py [NAME...]``: build (or check) the peer venvs ahead of a
    run."""
    names = sys.argv[1:] or list(PEERS)
    for name in names:
        if name not in PEERS:
            raise SystemExit(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
        try:
            print(ensure_peer_env(PEERS[name], progress=lambda line: print(f"  {line}", flush=True)))
        except PeerInstallError as exc:
            raise SystemExit(str(exc)) from None


if __name__ == "__main__":
    main()
