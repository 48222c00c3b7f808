"""User visits: each user's views since they were last idle for 30 minutes (a time to live).

Messages on the topic ``user-views`` are JSON page views, ``{"user": "u3", "page":
"/home", "ts": 1700000000000}`` (``ts``: event time, epoch milliseconds; other fields are
ignored). Messages that are not such objects go to ``visits.dead-letter``.

The ``visits`` bolt keeps, per user (two instances, split by user), a
``per_key(Ttl(..., 30 min))`` state (``per_key(inner, ttl=...)`` for short): a user's
*visit* is their views since the last gap of more than 30 minutes between view times,
whatever the order the views arrive in. After every view it emits the user's current
visit, and the sink upserts it into
``user_visits(user_id, visit_start_ms, last_view_ms, views)``: one row per user, their
latest visit.

State does not grow with every user ever seen: a user idle for 30 minutes plus the
retention (30 minutes) at every partition's newest view is dropped from memory (counted in
``hailstorm_keys_expired_total``); their row stays. A view 30 minutes or more behind the
newest view of its Kafka partition before it might belong to a dropped visit, so it is late:
it goes to the topic ``visits.late`` instead, the same in every run (see
:mod:`hailstorm.lateness`).
"""

from typing import Any

from hailstorm import Count, Max, Min, Record, Table, Topology, Ttl, per_key

IDLE_MS = 30 * 60 * 1000
VISIT = Record({"views": Count(), "first_ts": Min("long"), "last_ts": Max("long")})


def view_of(value: Any) -> list[dict[str, Any]]:
    """A page view: ``user`` (string) and ``ts`` (integer), else ValueError (the record
    becomes a dead letter)."""
    if not (isinstance(value, dict) and isinstance(value.get("user"), str)
            and type(value.get("ts")) is int):
        raise ValueError(f"not a JSON object with user (str) and ts (int): {value!r:.80}")
    return [value]


def visit_of(view: dict[str, Any]) -> dict[str, Any]:
    """One view's contribution to its user's visit."""
    return VISIT.lift(views=Count.one, first_ts=view["ts"], last_ts=view["ts"])


def visit_row(view: dict[str, Any], visit: dict[str, Any]) -> list[tuple[Any, ...]]:
    """``(user_id, visit_start_ms, last_view_ms, views)`` of the user's latest visit."""
    return [(view["user"], visit["first_ts"], visit["last_ts"], visit["views"])]


topology = Topology("visits")

views = topology.spout("views", topic="user-views", decoder="json", explode=view_of)

visits = topology.bolt(
    "visits",
    inputs=[views],
    key=lambda view: view["user"],
    state=per_key(Ttl(VISIT, IDLE_MS, unit="ms")),
    event_time=lambda view: view["ts"],
    lift=visit_of,
    emit=visit_row,
    parallelism=2,
    late="visits.late",
)

topology.sink(
    "user_visits",
    inputs=[visits],
    target=Table(
        "user_visits",
        columns={
            "user_id": "text",
            "visit_start_ms": "bigint",
            "last_view_ms": "bigint",
            "views": "bigint",
        },
        key=["user_id"],
        mode="upsert",
    ),
)
