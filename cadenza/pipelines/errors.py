"""The error a pipeline declaration raises when it cannot run as written.

Declarations are checked when they are made (or at ``compile()`` for whole-graph rules) rather than when
a worker first runs them, so a mistake surfaces at the user's own line, or in ``cadenza describe``, and
not minutes later inside a worker. The message always names the pipeline and, when there is one, the
step, because one module usually declares several pipelines of many steps.
"""

from __future__ import annotations

from cadenza.errors import CadenzaError


class PipelineDefinitionError(CadenzaError):
    """A pipeline, one of its steps or a window spec is malformed; the message says which and why.

    ``pipeline`` and ``step`` are kept apart from the message so a caller (the CLI) can group or
    highlight errors without parsing text; either is ``None`` when it does not apply.
    """

    def __init__(self, message: str, *, pipeline: str | None = None, step: str | None = None) -> None:
        prefix = ""
        if pipeline is not None:
            prefix = f"pipeline {pipeline!r}"
            if step is not None:
                prefix += f", step {step!r}"
            prefix += ": "
        elif step is not None:
            prefix = f"step {step!r}: "
        super().__init__(prefix + message)
        self.pipeline = pipeline
        self.step = step
        self.problem = message
