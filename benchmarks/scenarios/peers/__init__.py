"""Peer systems for the benchmarks: their virtual environments and the apps run inside them.

Peers whose pinned dependencies clash with cadenza's (faust-streaming, quixstreams) run from virtual
environments of their own (:mod:`benchmarks.peers.venvs`), so measuring them never changes what
cadenza's environment holds. The app modules here are plain scripts run by path inside the right
environment; the peer apps and the shared ``workload``/``cpu_work`` modules import nothing from cadenza
(``cpu_work`` loads the package's pure-stdlib ``cadenza/demo/cpu_work.py`` by file path).
"""
