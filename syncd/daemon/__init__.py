"""The daemon: :class:`Daemon`, the composition root (:mod:`~syncd.daemon.core`), with its
embedding API (:mod:`~syncd.daemon.embedding`), the instances' heartbeat and status
(:mod:`~syncd.daemon.instances`) and the metrics polled from the store and the queue
(:mod:`~syncd.daemon.metrics_poller`), and what runs it as a service — signals, reload and
systemd (:mod:`~syncd.daemon.runner`, :mod:`~syncd.daemon.systemd`) and the collector
settings of a long-running process (:mod:`~syncd.daemon.heap`).
"""

from __future__ import annotations

from syncd.daemon.core import Daemon

__all__ = ["Daemon"]
