"""``python -m cadenza`` is the ``cadenza`` command."""

from cadenza.cli import main

main()
