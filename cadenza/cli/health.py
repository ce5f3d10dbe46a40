"""``cadenza health``: probe a worker's HTTP endpoint; exit 0 if it answers 200, else 1 with the reason.

Written for container HEALTHCHECKs and scripts: the slim worker image has no curl or wget, and a probe
must answer within the check's timeout whatever the worker is doing, so the request has its own short
timeout and every failure (refused, timed out, 503, garbage) is one line on stderr and exit code 1.
"""

from __future__ import annotations

import http.client
import sys
from typing import Annotated

import typer

#: Liveness and readiness paths served by cadenza.infra.metrics.server.
PROBES = ("/healthz", "/readyz")


def probe(host: str, port: int, path: str, timeout: float) -> tuple[bool, str]:
    """(ok, one-line reason). ok only for HTTP 200; anything else says what went wrong."""
    where = f"http://{host}:{port}{path}"
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path, headers={"Connection": "close"})
        response = connection.getresponse()
        body = response.read(200).decode("utf-8", "replace").strip().splitlines()
    except ConnectionRefusedError:
        return False, f"{where}: connection refused (is the worker running with this metrics port?)"
    except TimeoutError:
        return False, f"{where}: no answer within {timeout:g}s"
    except (OSError, http.client.HTTPException) as exc:
        return False, f"{where}: {type(exc).__name__}: {exc}"
    finally:
        connection.close()
    detail = f" ({body[0]})" if body else ""
    if response.status == 200:
        return True, f"{where}: {response.status} {response.reason}{detail}"
    return False, f"{where}: {response.status} {response.reason}{detail}"


def health_command(
    port: Annotated[
        int,
        typer.Option(
            min=1, max=65535, envvar="CADENZA_METRICS_PORT", help="The worker's metrics/health port."
        ),
    ],
    host: Annotated[str, typer.Option(help="Where the worker listens.")] = "127.0.0.1",
    ready: Annotated[
        bool, typer.Option("--ready", help="Check readiness (/readyz) instead of liveness (/healthz).")
    ] = False,
    timeout: Annotated[float, typer.Option(min=0.1, help="Seconds to wait for the answer.")] = 3.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing when healthy.")] = False,
) -> None:
    """Exit 0 if the worker's /healthz (or /readyz with --ready) answers 200, else 1 with the reason."""
    path = PROBES[1] if ready else PROBES[0]
    ok, reason = probe(host, port, path, timeout)
    if ok:
        if not quiet:
            sys.stdout.write(f"healthy: {reason}\n")
        return
    sys.stderr.write(f"unhealthy: {reason}\n")
    raise typer.Exit(1)
