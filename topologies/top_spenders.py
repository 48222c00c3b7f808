"""Top spenders per country: the ten users who spent the most in each country.

A two-stage pipeline (spout -> bolt -> bolt -> sink). Messages of the Kafka topic ``events``
are JSON objects ``{"user": "u0001234", "amount": 37, "country": "DE"}`` (the shape
:class:`hailstorm.dev.workloads.KeyedEvents` generates, as for ``topologies/user_totals.py``).

* ``totals`` keeps, per ``(country, user)``, the ``Sum`` of the amounts (two instances,
  split by that key) and emits ``(country, user, spent_so_far)`` after every event;
* ``top`` keeps, per country, ``TopK(10)`` over users scored by those running totals (two
  instances, split by country). This is exact: a total only grows (negative amounts are
  refused, see below), and TopK keeps each user's highest score, so the state is the top
  ten of the current totals whatever the arrival order. Whenever the event's user is (still)
  in the top ten it emits the country's whole ranking ``(country, rank, user, spent)`` for
  ranks 1..n, ties broken by user id;
* the sink upserts those rows into ``top_spenders(country, rank, user_id, spent)`` keyed by
  ``(country, rank)``, so the table holds the current top ten of every country.

The first stage is keyed by ``(country, user)``, not by user alone, so the result does not
depend on arrival order even when a user's events name several countries: each country
ranks what its users spent there. (In ``KeyedEvents`` a user's country is fixed, ``user %
10``, so this is the same as a per-user total.) The first bolt feeds a bolt, so spouts
cannot pre-aggregate for it (``preaggregate=True`` is only allowed when upsert sinks alone
read a bolt): every event crosses both stages.

Messages that are not JSON objects with a string ``user``, a non-negative integer
``amount`` and a string ``country`` go to the dead-letter topic
``top_spenders.dead-letter``. (A negative amount would lower a total, and the ranking,
which keeps each user's highest total so far, would then depend on arrival order.)
"""

from typing import Any

from hailstorm import Sum, Table, TopK, Topology, per_key

try:  # loaded by dotted name (topologies.top_spenders): the package is importable
    from topologies.user_totals import event_of
except ModuleNotFoundError:  # loaded from its file: load_topology put its directory on the path
    from user_totals import event_of  # type: ignore[no-redef]

TOP = 10


def spend_of(message: Any) -> list[dict[str, Any]]:
    """The event of one message (``user_totals.event_of``) whose amount is not negative
    and which names a string ``country``; a DecodeError (dead letter) for anything else."""
    (event,) = event_of(message)
    if event["amount"] < 0 or not isinstance(event.get("country"), str):
        raise ValueError(f"not an event with an amount >= 0 and a string country: {message!r}")
    return [event]


def ranking(spend: tuple[str, str, int], top: dict[str, int]) -> list[tuple[Any, ...]]:
    """The country's ranking rows, or nothing when the user is outside its top ten."""
    country, user, _ = spend
    if user not in top:
        return []
    return [(country, rank, u, spent) for rank, (u, spent) in enumerate(TopK.top(top), start=1)]


topology = Topology("top_spenders")

events = topology.spout("events", topic="events", decoder="json", explode=spend_of)

totals = topology.bolt(
    "totals",
    inputs=[events],
    key=lambda event: (event["country"], event["user"]),
    state=per_key(Sum(), key_type=("string", "string")),
    lift=lambda event: event["amount"],
    emit=lambda event, spent: [(event["country"], event["user"], spent)],
    parallelism=2,
)

top = topology.bolt(
    "top",
    inputs=[totals],
    key=lambda spend: spend[0],
    state=per_key(TopK(TOP, item_type="string", score_type="long"), key_type="string"),
    lift=lambda spend: TopK.lift(spend[1], spend[2]),
    emit=ranking,
    parallelism=2,
)

topology.sink(
    "top_spenders",
    inputs=[top],
    target=Table(
        "top_spenders",
        columns={"country": "text", "rank": "integer", "user_id": "text", "spent": "bigint"},
        key=["country", "rank"],
        mode="upsert",
    ),
)
