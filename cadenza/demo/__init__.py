"""The harness behind ``cadenza demo``, shipped in the package so an installed cadenza runs the demo.

- :mod:`cadenza.demo.smoke`: the worker-less broker round trip of ``cadenza demo --smoke``;
- :mod:`cadenza.demo.s1`: scenario S1 (two tenants on one worker under Pareto bursts), which
  ``cadenza demo`` runs under ``fifo`` and ``cameo`` and the checkout's
  ``benchmarks/scenarios/bench_s1.py`` runs under every policy and against faust; its parts are
  :mod:`cadenza.demo.s1_config`, :mod:`cadenza.demo.s1_io`, :mod:`cadenza.demo.s1_process`,
  :mod:`cadenza.demo.s1_results`, :mod:`cadenza.demo.s1_plot` and :mod:`cadenza.demo.worker_metrics`;
- :mod:`cadenza.demo.phases`: the demo's verdict, each policy pooled over its phases;
- :mod:`cadenza.demo.s1_pipelines`: S1's pipelines, run by ``cadenza worker cadenza.demo.s1_pipelines``;
- :mod:`cadenza.demo.feedback`: the stats job over the workers' spans and what a worker learns from it.

Nothing here is imported by ``import cadenza``: the harness is loaded when a command asks for it.
"""
