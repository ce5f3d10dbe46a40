"""A griffe extension for the API reference: cadenza's docstrings name code with Sphinx roles
(``:class:`~cadenza.worker.Worker```); mkdocstrings renders Markdown, so each role becomes a code span
of the name as Sphinx would show it (the last part after ``~``, else the whole path)."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:class|meth|func|mod|attr|data|exc|obj|const):`(~?)([^`]+)`")


def plain(text: str) -> str:
    """``text`` with every Sphinx role replaced by a Markdown code span."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(2)
        if match.group(1):
            name = name.rsplit(".", 1)[-1]
        return f"`{name}`"

    return _ROLE.sub(replace, text)


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
