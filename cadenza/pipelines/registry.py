"""Finding the pipelines a user module declares, for ``cadenza describe`` and for workers.

Pipelines are ordinary module-level objects; there is no decorator or global registry to forget, and
importing a module twice (say from tests and from the CLI) cannot register a pipeline twice.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType

from cadenza.pipelines.errors import PipelineDefinitionError
from cadenza.pipelines.pipeline import Pipeline


def load_pipelines(module: str | os.PathLike[str] | ModuleType) -> list[Pipeline]:
    """The ``Pipeline`` objects bound at module level in ``module``, in definition order.

    ``module`` is a dotted module name (``myapp.pipelines``, importable from ``sys.path``), a path to a
    ``.py`` file, or an already imported module. A module that cannot be imported, declares no
    pipeline, or declares two pipelines of the same name (they would share internal topics) is a
    :class:`PipelineDefinitionError` naming the module.
    """
    if isinstance(module, ModuleType):
        loaded, label = module, module.__name__
    elif _looks_like_path(module):
        label = os.fspath(module)
        loaded = _import_file(Path(label))
    else:
        label = str(module)
        loaded = _import_name(label)
    found: list[Pipeline] = []
    for value in vars(loaded).values():
        if isinstance(value, Pipeline) and not any(value is seen for seen in found):
            found.append(value)
    if not found:
        raise PipelineDefinitionError(
            f"module {label!r} declares no pipeline; bind a Pipeline(...) to a module-level name"
        )
    names: dict[str, Pipeline] = {}
    for pipeline in found:
        if pipeline.name in names:
            raise PipelineDefinitionError(
                f"module {label!r} declares two pipelines named {pipeline.name!r}; names must be unique "
                "because they prefix the internal topics",
                pipeline=pipeline.name,
            )
        names[pipeline.name] = pipeline
    return found


def _looks_like_path(module: str | os.PathLike[str]) -> bool:
    if not isinstance(module, str):
        return True
    return module.endswith(".py") or "/" in module or os.sep in module


def _import_name(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as exc:
        raise PipelineDefinitionError(f"cannot import module {name!r}: {type(exc).__name__}: {exc}") from exc


def _import_file(path: Path) -> ModuleType:
    if not path.is_file():
        raise PipelineDefinitionError(f"cannot import module {str(path)!r}: no such file")
    # A private module name, so a user file called json.py or test.py cannot shadow a real module in
    # sys.modules. It must be registered before running the code: pydantic resolves the annotations
    # of the user's models through sys.modules[cls.__module__].
    name = "_cadenza_user_" + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PipelineDefinitionError(f"cannot import module {str(path)!r}: not a Python source file")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[name] = loaded
    # Like `python file.py`, let the file import its siblings, but only while it is being imported.
    directory = str(path.resolve().parent)
    added = directory not in sys.path
    if added:
        sys.path.insert(0, directory)
    try:
        spec.loader.exec_module(loaded)
    except Exception as exc:
        del sys.modules[name]
        raise PipelineDefinitionError(
            f"cannot import module {str(path)!r}: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        if added:
            sys.path.remove(directory)
    return loaded
