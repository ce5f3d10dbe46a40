"""Window *specs*: what a user declares, not how records are assigned to windows.

The specs are pydantic models with a ``kind`` discriminator so that a compiled graph carries them as
plain JSON and a worker (or ``cadenza describe``) can rebuild them with :data:`WINDOW_SPEC_ADAPTER`.
Assignment itself lives in ``cadenza.operators``; keeping the declaration here lets a pipeline be
checked and described without importing any runtime code.

Durations are written the way people write them (``Tumbling("1s")``) and stored as float seconds in
fields ending in ``_s``, the unit every cadenza clock uses. Invalid specs raise
:class:`PipelineDefinitionError` at construction, so the error points at the user's line.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any, ClassVar, Literal, TypeAlias

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from cadenza.durations import parse_duration
from cadenza.pipelines._format import format_duration
from cadenza.pipelines.errors import PipelineDefinitionError

DurationLike: TypeAlias = str | float | timedelta
"""Anything :func:`cadenza.durations.parse_duration` reads: ``"250ms"``, ``1.5`` (seconds), a timedelta."""


class _WindowSpec(BaseModel):
    """Shared validation: durations parsed from human strings, errors turned into definition errors.

    ``defer_build``: each spec's validator is built when the spec is first used, not when cadenza is
    imported (declaring a pipeline uses one or two of the four; building all cost most of the import).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    # The user-facing parameter name for each stored ``*_s`` field, so messages use the words the
    # user typed ("size", not "size_s").
    _labels: ClassVar[dict[str, str]] = {}

    def __init__(self, **data: Any) -> None:
        # Keyword renames (size= -> size_s=) happen in the subclasses; here every failure, whether
        # from a user call or from model_validate on a stored graph, becomes one readable message.
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise PipelineDefinitionError(f"{type(self).__name__} window: {self._problem(exc)}") from None

    @field_validator("size_s", "hop_s", "gap_s", mode="before", check_fields=False)
    @classmethod
    def _parse_durations(cls, value: Any, info: ValidationInfo) -> Any:
        name = str(info.field_name)
        label = cls._labels.get(name, name)
        seconds = parse_duration(value, what=label)
        if seconds <= 0:
            raise ValueError(f"{label} must be greater than zero, got {value!r}")
        return seconds

    @classmethod
    def _problem(cls, exc: ValidationError) -> str:
        error = exc.errors()[0]
        message = str(error["msg"]).removeprefix("Value error, ")
        field = ".".join(cls._labels.get(str(part), str(part)) for part in error["loc"])
        if error["type"] == "missing":
            return f"{field} is required"
        if error["type"] in {"extra_forbidden", "literal_error"}:
            return f"{field}: {message}"
        return message

    def describe(self) -> str:
        """A short human form such as ``tumbling 1s``, used by ``cadenza describe``."""
        raise NotImplementedError


def _rename(data: dict[str, Any], user_name: str, stored_name: str, value: Any) -> None:
    if value is not None:
        data[stored_name] = value
    elif user_name in data:
        data[stored_name] = data.pop(user_name)


class Tumbling(_WindowSpec):
    """Fixed-size, non-overlapping windows aligned to the epoch: each record is in exactly one."""

    _labels: ClassVar[dict[str, str]] = {"size_s": "size"}

    kind: Literal["tumbling"] = "tumbling"
    size_s: float

    def __init__(self, size: DurationLike | None = None, /, **data: Any) -> None:
        _rename(data, "size", "size_s", size)
        super().__init__(**data)

    def describe(self) -> str:
        return f"tumbling {format_duration(self.size_s)}"


class Hopping(_WindowSpec):
    """Fixed-size windows starting every ``hop``; a record is in ``size / hop`` windows.

    ``hop`` larger than ``size`` would leave gaps where records belong to no window, which is almost
    always a typo for swapped arguments, so it is refused.
    """

    _labels: ClassVar[dict[str, str]] = {"size_s": "size", "hop_s": "hop"}

    kind: Literal["hopping"] = "hopping"
    size_s: float
    hop_s: float

    def __init__(
        self, size: DurationLike | None = None, hop: DurationLike | None = None, /, **data: Any
    ) -> None:
        _rename(data, "size", "size_s", size)
        _rename(data, "hop", "hop_s", hop)
        super().__init__(**data)

    def model_post_init(self, context: Any, /) -> None:
        if self.hop_s > self.size_s:
            raise PipelineDefinitionError(
                f"Hopping window: hop ({self.hop_s:g}s) must not exceed size ({self.size_s:g}s); "
                "records between windows would be dropped"
            )

    def describe(self) -> str:
        return f"hopping {format_duration(self.size_s)} every {format_duration(self.hop_s)}"


class Sliding(_WindowSpec):
    """Kafka Streams sliding windows: two records share a window when their timestamps differ by at
    most ``size``. Windows are created by records, not by the clock, so there are no empty windows.
    """

    _labels: ClassVar[dict[str, str]] = {"size_s": "size"}

    kind: Literal["sliding"] = "sliding"
    size_s: float

    def __init__(self, size: DurationLike | None = None, /, **data: Any) -> None:
        _rename(data, "size", "size_s", size)
        super().__init__(**data)

    def describe(self) -> str:
        return f"sliding {format_duration(self.size_s)}"


class Session(_WindowSpec):
    """Per-key activity sessions closed by ``gap`` of inactivity; sessions merge when a record bridges
    two of them, which is why aggregations over sessions need a ``merge`` function.
    """

    _labels: ClassVar[dict[str, str]] = {"gap_s": "gap"}

    kind: Literal["session"] = "session"
    gap_s: float

    def __init__(self, gap: DurationLike | None = None, /, **data: Any) -> None:
        _rename(data, "gap", "gap_s", gap)
        super().__init__(**data)

    def describe(self) -> str:
        return f"session gap {format_duration(self.gap_s)}"


WindowSpec: TypeAlias = Annotated[Tumbling | Hopping | Sliding | Session, Field(discriminator="kind")]
"""Any window spec; the ``kind`` field tells them apart in JSON."""

WINDOW_SPEC_ADAPTER: TypeAdapter[Tumbling | Hopping | Sliding | Session] = TypeAdapter(
    WindowSpec, config=ConfigDict(defer_build=True)
)
"""Rebuilds a spec from its JSON/dict form: ``WINDOW_SPEC_ADAPTER.validate_python(parameters["window"])``."""

WINDOW_SPEC_TYPES: tuple[type[_WindowSpec], ...] = (Tumbling, Hopping, Sliding, Session)
