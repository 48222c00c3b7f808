"""``hailstorm status TOPOLOGY``: one view of a running topology.

Reads ZooKeeper (master state, committed record, expected processors, their reports, the
bolts' snapshot reports, the negotiators), Kafka (each source partition's watermarks), the
snapshot store (size of each bolt's last snapshot) and every processor's ``/metrics``.

The pieces (a package; import these names from ``hailstorm.status``):

* :mod:`~hailstorm.status.collect`: :class:`Collector` does the I/O and returns the raw
  :class:`Inputs`; :func:`status` samples twice for rates; :class:`StatusWatch` follows it (through
  ZooKeeper outages); :func:`run_status` is the command;
* :mod:`~hailstorm.status.document` (pure): :func:`assemble` turns inputs into the status
  document (the ``--json`` output); :func:`rates` derives messages/s from two scrapes;
  :func:`waiting_for_zookeeper` is the document while ZooKeeper cannot be read;
* :mod:`~hailstorm.status.render` (pure): :func:`render` draws the document with rich.
"""

from hailstorm.status.collect import (
    Collector,
    StatusWatch,
    ZooKeeperUnavailable,
    open_collector,
    resolve_name,
    run_status,
    scrape_all,
    status,
)
from hailstorm.status.document import (
    LAG_NOTE,
    RECOVERIES_SHOWN,
    Inputs,
    Scrape,
    assemble,
    is_store_ref,
    rates,
    waiting_for_zookeeper,
    zookeeper_wait,
)
from hailstorm.status.render import render

__all__ = [
    "LAG_NOTE",
    "RECOVERIES_SHOWN",
    "Collector",
    "Inputs",
    "Scrape",
    "StatusWatch",
    "ZooKeeperUnavailable",
    "assemble",
    "is_store_ref",
    "open_collector",
    "rates",
    "render",
    "resolve_name",
    "run_status",
    "scrape_all",
    "status",
    "waiting_for_zookeeper",
    "zookeeper_wait",
]
