"""The engine: what runs records, whatever transport brings them.

Admission (decode, scheduling context, queue), the run stage (scheduler and executor), the operators,
timers and progress records, pipeline stop, dead letters and late records, and the produce stage.
It knows nothing of consumer groups: :class:`cadenza.worker.runtime.Worker` drives it over Kafka,
:class:`cadenza.testing.PipelineDriver` over the in-memory transport of :mod:`.memory`.
"""
