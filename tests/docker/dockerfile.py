"""Just enough of a Dockerfile parser to check ours without Docker: stages, ENV, commands.

Continuation lines are joined and comments dropped; each instruction keeps its stage. Values are
resolved only as far as the checks need: ``${VAR}`` from the global ARG defaults (for FROM) or from
the stage's ENV (for a shell-form HEALTHCHECK).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Instruction:
    keyword: str
    arguments: str
    line: int


@dataclass
class Stage:
    name: str
    base: str
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


@dataclass
class Dockerfile:
    global_args: dict[str, str]
    stages: list[Stage]

    def stage(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise KeyError(f"no stage {name!r}; stages: {[s.name for s in self.stages]}")

    def lineage(self, name: str) -> list[Stage]:
        """The stage and the stages it is built FROM, nearest first."""
        chain = [self.stage(name)]
        names = {s.name for s in self.stages}
        while chain[-1].base in names:
            chain.append(self.stage(chain[-1].base))
        return chain

    def env(self, name: str) -> dict[str, str]:
        """ENV in force in stage ``name`` (inherited through FROM <stage>)."""
        values: dict[str, str] = {}
        for stage in reversed(self.lineage(name)):
            for instruction in stage.all("ENV"):
                values.update(parse_env(instruction.arguments))
        return values

    def last(self, name: str, keyword: str) -> Instruction | None:
        """The instruction in force for ``keyword`` (the last one along the lineage)."""
        for stage in self.lineage(name):
            found = stage.all(keyword)
            if found:
                return found[-1]
        return None


def logical_lines(text: str) -> list[tuple[int, str]]:
    lines: list[tuple[int, str]] = []
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buffer and (not stripped or stripped.startswith("#")):
            continue
        if buffer and stripped.startswith("#"):
            continue  # a comment inside a continued instruction
        if not buffer:
            start = number
        if stripped.endswith("\\"):
            buffer += stripped[:-1] + " "
            continue
        buffer += stripped
        lines.append((start, buffer))
        buffer = ""
    if buffer:
        raise ValueError(f"line {start}: the file ends inside a continued instruction")
    return lines


def parse(path: Path) -> Dockerfile:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for line, text in logical_lines(path.read_text()):
        keyword, _, arguments = text.partition(" ")
        keyword = keyword.upper()
        arguments = arguments.strip()
        if keyword == "FROM":
            words = arguments.split()
            if len(words) == 3 and words[1].upper() == "AS":
                base, name = words[0], words[2]
            elif len(words) == 1:
                base, name = words[0], str(len(stages))
            else:
                raise ValueError(f"line {line}: cannot read FROM {arguments!r}")
            stages.append(Stage(name, base, line))
        elif not stages:
            if keyword != "ARG":
                raise ValueError(f"line {line}: {keyword} before the first FROM")
            key, _, default = arguments.partition("=")
            global_args[key] = default.strip('"')
        else:
            stages[-1].instructions.append(Instruction(keyword, arguments, line))
    return Dockerfile(global_args, stages)


def parse_env(arguments: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for word in shlex.split(arguments):
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"ENV {arguments!r}: use the KEY=value form")
        values[key] = value
    return values


def expand(text: str, values: dict[str, str]) -> str:
    """Substitute ``$VAR``/``${VAR}``; an unknown variable is an error, not an empty string."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"${name} is not defined")
        return values[name]

    return _VAR.sub(substitute, text)


def command_words(arguments: str, env: dict[str, str]) -> list[str]:
    """The argv of an exec-form (JSON array) or shell-form command, variables expanded."""
    if arguments.startswith("["):
        words = json.loads(arguments)
        assert isinstance(words, list) and all(isinstance(w, str) for w in words), arguments
        return [str(w) for w in words]
    return shlex.split(expand(arguments, env))


def healthcheck_command(arguments: str) -> str:
    """The command part of ``HEALTHCHECK [--options] CMD command``."""
    match = re.fullmatch(r"(?:--\S+\s+)*CMD\s+(.+)", arguments.strip(), flags=re.DOTALL)
    if match is None:
        raise ValueError(f"HEALTHCHECK {arguments!r}: expected [--option...] CMD command")
    return match.group(1).strip()
