"""Kafka membership: how a worker takes part in a consumer group.

Fetch lanes and flow control, rebalances, restores of window state from changelogs, checkpoints
and commits, the group's plan and plan ownership. Everything here feeds the engine
(:mod:`cadenza.worker.engine`) or makes what it ran durable; nothing here runs a record.
"""
