"""The protocol of a topology: what processors, the driver, the negotiator and the tools
agree on. This package owns it; everybody else imports it from here.

- :mod:`~hailstorm.protocol.clock` — offset clocks and low water marks (pure);
- :mod:`~hailstorm.protocol.states` — the master states and their legal transitions (pure);
- :mod:`~hailstorm.protocol.layout` — the ZooKeeper paths, processor ids and JSON records
  (pure);
- :mod:`~hailstorm.protocol.records` — :class:`~hailstorm.protocol.records.TopologyRecords`,
  the one typed reader and writer of those records on a kazoo client (the one place that
  turns a missing node or an unreadable record into ``None``);
- :mod:`~hailstorm.protocol.wire` — the data plane's frame format (pure, plus blocking
  socket helpers).

Dependencies point inward only: nothing here imports :mod:`hailstorm.negotiator`, the processor
shells (:mod:`hailstorm.runtime`) or the cores (:mod:`hailstorm.processors`); the modules
import each other, :mod:`hailstorm.auth` (the wire's frame MACs) and kazoo (the records).
This ``__init__`` imports nothing, so a pure module's importers never load kazoo.
"""
