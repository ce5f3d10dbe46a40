"""The README's "Testing your pipelines" example runs as written."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_example_passes() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Testing your pipelines", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1
    namespace: dict[str, object] = {}
    sys.path.insert(0, str(ROOT))  # the example imports examples.clicks_per_user
    try:
        exec(compile(blocks[0], "README.md", "exec"), namespace)
    finally:
        sys.path.remove(str(ROOT))
    test = namespace["test_clicks_per_user"]
    assert callable(test)
    test()
