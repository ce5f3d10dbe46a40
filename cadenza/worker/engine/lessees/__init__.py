"""Lessees: where a parallel step's calls run beside the worker's loop (Dirigo's dual-mode operators).

The worker's one Python thread is the *lessor*. A step declared with ``parallel=`` hands its records'
values to *lessees* (processes for CPU-bound Python, threads for blocking I/O) and gets their
outcomes back as they arrive; the operator (:mod:`cadenza.worker.engine.operators.parallel_step`)
releases them in offset order per partition, so what follows the step sees exactly what it would
have seen without lessees. See ``docs/parallel.md``.

- :mod:`.calls`: what a lessee runs on a batch (the same function in a thread and in a process);
- :mod:`.lessee`: the two kinds of lessee and their wire;
- :mod:`.leasing`: when a step leases and releases (slack, hysteresis), pure and clock-injected;
- :mod:`.leased_step`: one step's lessees, queue and in-flight batches;
- :mod:`.hub`: every step's lessees of one worker, the core budget and the warm pool.
"""
