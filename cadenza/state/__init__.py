"""Operator state: per-partition stores backed by compacted changelog topics.

``store`` holds the state, ``changelog`` says what is written and how it is replayed, ``serde`` turns
keys and values into bytes, ``restore`` reads changelog partitions back from the broker.

This package exports what its modules export: each module's ``__all__`` is the one list of its
public names, so a name added there needs no second entry here.
"""

from cadenza.state import changelog, factory, restore, serde, store
from cadenza.state.changelog import *  # noqa: F403
from cadenza.state.factory import *  # noqa: F403
from cadenza.state.restore import *  # noqa: F403
from cadenza.state.serde import *  # noqa: F403
from cadenza.state.store import *  # noqa: F403

__all__: list[str] = []
__all__ += changelog.__all__
__all__ += factory.__all__
__all__ += restore.__all__
__all__ += serde.__all__
__all__ += store.__all__
