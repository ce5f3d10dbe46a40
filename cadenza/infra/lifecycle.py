"""Components that run something (a thread, a client) between ``start()`` and ``close()``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self

__all__ = ["Lifecycle"]


class Lifecycle(ABC):
    """``with component:`` starts it and closes it on the way out, also when the block raises, so a
    test or a script cannot leave its thread or client running."""

    __slots__ = ()

    @abstractmethod
    def start(self) -> object:
        """Begin; called once, before use."""

    @abstractmethod
    def close(self) -> None:
        """End, releasing what ``start`` took; safe to call more than once."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
