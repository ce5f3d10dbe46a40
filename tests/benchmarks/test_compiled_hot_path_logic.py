"""``compiled_hot_path.py`` edits its copy of the tree in two mechanical ways before mypyc builds it;
both edits are checked here on made-up modules, and the line the first one rewrites is checked to be
still there in the real scheduler (the script stops with a message when it is not)."""

from __future__ import annotations

import ast
from pathlib import Path

from compiled_hot_path import DEFAULT_MODULES, NATIVE_TUPLE_NEXT, ROOT, _without_slots


def test_slots_statements_become_pass_and_nothing_else_changes(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "class A:\n"
        "    __slots__ = ('a',)\n"
        "\n"
        "    def f(self) -> None:\n"
        "        slots = '__slots__ = 1'\n"
        "\n"
        "\n"
        "class B(A):\n"
        "    __slots__ = (\n"
        "        'b',\n"
        "        'c',\n"
        "    )\n"
        "    x = 1\n"
    )
    _without_slots(module)
    text = module.read_text()
    tree = ast.parse(text)
    assigned = [node.targets for node in ast.walk(tree) if isinstance(node, ast.Assign)]
    names = [target.id for targets in assigned for target in targets if isinstance(target, ast.Name)]
    assert sorted(names) == ["slots", "x"]
    assert text.count("    pass\n") == 2 and "'__slots__ = 1'" in text


def test_the_scheduler_still_has_the_line_the_work_around_rewrites() -> None:
    assert NATIVE_TUPLE_NEXT in (ROOT / "cadenza/scheduling/scheduler.py").read_text()


def test_the_default_modules_exist() -> None:
    assert all((ROOT / module).is_file() for module in DEFAULT_MODULES)
