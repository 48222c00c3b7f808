"""Page views: views, distinct users and mean latency per page and 5-minute window.

Messages on the topic ``page-views`` are schemaless Avro records written with
:data:`PAGE_VIEW_SCHEMA`: ``page`` (string), ``user`` (string), ``ts`` (event time, epoch
milliseconds) and ``latency_ms`` (long). Messages that do not decode with that schema go to
``pageviews.dead-letter``; views that come too late go to ``pageviews.late``.

The ``page_windows`` bolt keeps, per page (four instances, split by page), tumbling
5-minute event-time windows ``[start, start + 300000)`` of a ``Record`` of three monoids:

* ``views``: ``Count``, the number of views;
* ``users``: ``HyperLogLog``, the approximate number of distinct users (about 3% error;
  exact in practice for a handful of users);
* ``latency``: ``Mean`` of ``latency_ms``.

Each spout combines the views of every batch it fetches per page and window
(``preaggregate=True``); the bolt absorbs each combination and emits that window's current
figures, and the sink upserts them into ``page_stats(page, window_start_ms, views, users,
mean_latency_ms)`` keyed by ``(page, window_start_ms)``: the row's key depends only on the
bolt's key and the view's window, as pre-aggregation requires. Windows come from each
view's own ``ts``, so the result does not depend on processing speed or order.

Late views: a view whose window had closed 5 minutes (the retention) before the newest view
of its Kafka partition read so far (its window's end + 5 min <= that event time) is not
counted; it is written to the topic ``pageviews.late`` with its window and event time in
the headers. The decision depends only on the partition's content, never on timing.
"""

from typing import Any

from hailstorm import (
    Avro,
    Count,
    HyperLogLog,
    Mean,
    Record,
    Table,
    Topology,
    TumblingWindow,
    per_key,
)

PAGE_VIEW_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "PageView",
    "namespace": "hailstorm.examples",
    "fields": [
        {"name": "page", "type": "string"},
        {"name": "user", "type": "string"},
        {"name": "ts", "type": "long", "doc": "event time, epoch milliseconds"},
        {"name": "latency_ms", "type": "long"},
    ],
}

WINDOW_MS = 5 * 60 * 1000
USERS = HyperLogLog(precision=10)
STATS = Record({"views": Count(), "users": USERS, "latency": Mean()})
WINDOWS = TumblingWindow(WINDOW_MS, STATS, unit="ms")


def observation(view: dict[str, Any]) -> dict[str, Any]:
    """The statistics of one page view."""
    return STATS.lift(
        views=Count.one, users=USERS.lift(view["user"]), latency=Mean.lift(view["latency_ms"])
    )


def window_row(view: dict[str, Any], windows: Any) -> list[tuple[Any, ...]]:
    """``(page, window_start_ms, views, users, mean_latency_ms)`` of the view's window."""
    (start,) = WINDOWS.window_starts(view["ts"])
    stats = windows[1][start]  # late views never reach the bolt: their window is there
    users = round(USERS.estimate(stats["users"]))
    mean_latency = Mean.value(stats["latency"])
    return [(view["page"], start, stats["views"], users, mean_latency)]


topology = Topology("pageviews")

views = topology.spout("views", topic="page-views", decoder=Avro(PAGE_VIEW_SCHEMA))

page_windows = topology.bolt(
    "page_windows",
    inputs=[views],
    key=lambda view: view["page"],
    state=per_key(WINDOWS),
    event_time=lambda view: view["ts"],
    lift=observation,
    emit=window_row,
    parallelism=4,
    late="pageviews.late",
    preaggregate=True,
)

topology.sink(
    "page_stats",
    inputs=[page_windows],
    target=Table(
        "page_stats",
        columns={
            "page": "text",
            "window_start_ms": "bigint",
            "views": "bigint",
            "users": "bigint",
            "mean_latency_ms": "double precision",
        },
        key=["page", "window_start_ms"],
        mode="upsert",
    ),
)
