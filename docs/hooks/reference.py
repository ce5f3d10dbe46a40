"""MkDocs hook: the generated parts of the site, rendered from the code at build time.

- ``<!-- cadenza:cli -->`` becomes the reference of every ``cadenza`` command, read from the typer app
  (``typer.main.get_command``): usage, help, arguments and options with their variables and defaults.
- ``<!-- cadenza:settings package.module:Model -->`` becomes the table of a pydantic-settings model's
  fields (variable, type, default, range, meaning); ``WorkerConfig``'s is
  :func:`cadenza.worker.config.settings_table`, the one its own tests check.
- ``benchmarks/RESULTS.md`` is added to the site as the page ``benchmarks/RESULTS.md``, read from the
  checkout on every build, never copied into ``docs/``. Its relative links keep working because the site
  mirrors the repository there: every existing non-Markdown file it links to (plots, JSON, scripts) is
  served at its repository path; a link into ``docs/`` is pointed at that page of the site; a link to
  another Markdown file outside ``docs/`` (a dated NOTES.md, say) becomes its repository path in code,
  since that file is not a page of the site. A link to a file that does not exist is left alone, so
  ``mkdocs build --strict`` fails on it as on any broken link.
"""

from __future__ import annotations

import enum
import importlib
import posixpath
import re
import types
import typing
from pathlib import Path
from typing import Any

import typer
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings
from typer.core import TyperArgument, TyperGroup, TyperOption

from cadenza.cli.app import app
from cadenza.worker.config import WorkerConfig, settings_table

ROOT = Path(__file__).resolve().parents[2]
#: Documents of the repository served as pages of the site at their repository path.
INCLUDED_PAGES = ("benchmarks/RESULTS.md",)

_SETTINGS = re.compile(r"<!-- cadenza:settings ([\w.]+):(\w+) -->")
_CLI = "<!-- cadenza:cli -->"
#: Inline links and images: ``[text](target)`` / ``![alt](target "title")``.
_LINK = re.compile(r"(!?\[(?:[^\]\\]|\\.)*\])\(([^)\s]+)((?:\s+\"[^\"]*\")?)\)")


# -- settings -----------------------------------------------------------------------------------------


def _type_text(annotation: Any) -> str:
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{member.value}`" for member in annotation)
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return " \\| ".join(_type_text(arg) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return "unset"
    name = getattr(annotation, "__name__", None) or str(annotation)
    return {"SecretStr": "secret", "Path": "path"}.get(name, name)


def _default_text(field: FieldInfo) -> str:
    default = field.default
    if default is None:
        return ""
    if isinstance(default, enum.Enum):
        default = default.value
    return f"`{default:g}`" if isinstance(default, float) else f"`{default}`"


def _range_text(field: FieldInfo) -> str:
    symbols = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
    found = [
        f"{symbols[name]} {getattr(constraint, name):g}"
        for constraint in field.metadata
        for name in symbols
        if getattr(constraint, name, None) is not None
    ]
    return ", ".join(found)


def settings_markdown(model: type[BaseSettings]) -> str:
    """One row per field of ``model``: its variable, type, default, range and description."""
    if model is WorkerConfig:
        return settings_table()
    prefix = str(model.model_config.get("env_prefix", ""))
    rows = ["| variable | type | default | range | meaning |", "|---|---|---|---|---|"]
    for name, field in model.model_fields.items():
        rows.append(
            f"| `{prefix}{name.upper()}` | {_type_text(field.annotation)} | {_default_text(field)} | "
            f"{_range_text(field)} | {field.description or ''} |"
        )
    return "\n".join(rows)


def _settings(match: re.Match[str]) -> str:
    model = getattr(importlib.import_module(match.group(1)), match.group(2))
    return settings_markdown(model)


# -- the command line ---------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _option_row(param: TyperOption) -> str:
    names = ", ".join(f"`{name}`" for name in [*param.opts, *param.secondary_opts])
    envvar = param.envvar if isinstance(param.envvar, str) else ", ".join(param.envvar or ())
    default = param.default
    if callable(default) or default is None or param.is_flag:
        default_text = f"`{default}`" if isinstance(default, bool) and default else ""
    elif isinstance(default, list | tuple):
        default_text = ", ".join(f"`{item}`" for item in default)
    else:
        default_text = f"`{default}`"
    help_text = _cell(getattr(param, "help", None) or "")
    return f"| {names} | {f'`{envvar}`' if envvar else ''} | {default_text} | {help_text} |"


def _command_markdown(command: Any, ctx: typer.Context, level: int) -> list[str]:
    path = ctx.command_path
    lines = [f"{'#' * level} `{path}`", ""]
    if command.help:
        lines += [command.help.replace("\b\n", "").strip(), ""]
    lines += ["```text", command.get_usage(ctx), "```", ""]
    arguments = [p for p in command.params if isinstance(p, TyperArgument)]
    if arguments:
        lines += ["| argument | required | meaning |", "|---|---|---|"]
        lines += [
            f"| `{(p.metavar or p.name or '').upper()}{'...' if p.nargs == -1 else ''}` | "
            f"{'yes' if p.required else 'no'} | {_cell(p.help or '')} |"
            for p in arguments
        ]
        lines.append("")
    options = [p for p in command.params if isinstance(p, TyperOption) and not p.hidden]
    if options:
        lines += ["| option | variable | default | meaning |", "|---|---|---|---|"]
        lines += [_option_row(p) for p in options]
        lines.append("")
    if isinstance(command, TyperGroup):
        for name, sub in command.commands.items():
            if not sub.hidden:
                lines += _command_markdown(sub, typer.Context(sub, info_name=name, parent=ctx), level + 1)
    return lines


def cli_markdown() -> str:
    """The reference of the ``cadenza`` command and all its sub-commands, from the typer app."""
    command = typer.main.get_command(app)
    return "\n".join(_command_markdown(command, typer.Context(command, info_name="cadenza"), 2))


# -- documents of the repository as pages -------------------------------------------------------------


def _linked_paths(markdown: str, src_uri: str) -> list[tuple[str, str]]:
    """(link target, its path in the repository) of each relative link of a page at ``src_uri``."""
    found = []
    for match in _LINK.finditer(markdown):
        target = match.group(2)
        if "://" in target or target.startswith(("#", "/", "mailto:")):
            continue
        path = target.split("#", 1)[0]
        if path:
            found.append((target, posixpath.normpath(posixpath.join(posixpath.dirname(src_uri), path))))
    return found


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for src_uri in INCLUDED_PAGES:
        page = ROOT / src_uri
        files.append(File.generated(config, src_uri, abs_src_path=str(page)))
        for _target, path in _linked_paths(page.read_text(encoding="utf-8"), src_uri):
            source = ROOT / path
            if path.endswith(".md") or not source.is_file() or files.get_file_from_path(path) is not None:
                continue
            files.append(File.generated(config, path, abs_src_path=str(source)))
    return files


def _rewrite_link(match: re.Match[str], src_uri: str) -> str:
    label, target, title = match.groups()
    if "://" in target or target.startswith(("#", "/", "mailto:")):
        return match.group(0)
    path, _, anchor = target.partition("#")
    repo_path = posixpath.normpath(posixpath.join(posixpath.dirname(src_uri), path))
    if not repo_path.endswith(".md") or not (ROOT / repo_path).is_file():
        return match.group(0)  # served at its repository path, or broken (strict fails)
    if repo_path.startswith("docs/"):
        site_target = posixpath.relpath(repo_path.removeprefix("docs/"), posixpath.dirname(src_uri))
        return f"{label}({site_target}{'#' + anchor if anchor else ''}{title})"
    if label.startswith("!"):
        return match.group(0)
    return f"{label[1:-1]} (`{repo_path}` in the repository)"


def on_page_markdown(markdown: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    if page.file.src_uri in INCLUDED_PAGES:
        return _LINK.sub(lambda match: _rewrite_link(match, page.file.src_uri), markdown)
    if _CLI in markdown:
        markdown = markdown.replace(_CLI, cli_markdown())
    return _SETTINGS.sub(_settings, markdown)
