"""``cadenza worker --help`` shows the help of every argument and option, the fixed ones included.

The command's signature is rebuilt from WorkerConfig's fields; read without evaluating the module's
postponed annotations, the fixed parameters reached typer as strings and lost their help."""

from __future__ import annotations

from typer.testing import CliRunner

from cadenza.cli.app import app


def test_the_help_of_the_modules_argument_and_the_log_options_is_shown() -> None:
    result = CliRunner().invoke(app, ["worker", "--help"], env={"COLUMNS": "200"}, terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Modules declaring pipelines: dotted names or .py file paths." in result.output
    assert "Logging level (default: the global --log-level" in result.output
    assert "rich (for people) or json (one object per line)" in result.output
    assert "Consumer group of the deployment" in result.output  # a WorkerConfig option, as before
