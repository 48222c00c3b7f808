"""Per-user totals: how much each user spent, in how many events, kept up to date in a table.

Each message of the Kafka topic ``events`` is a JSON object ``{"user": "u0001234",
"amount": 37, "country": "DE"}`` (the shape :class:`hailstorm.dev.workloads.KeyedEvents`
generates). The ``totals`` bolt keeps, per user, a ``Record`` of the amounts' ``Sum`` and
the events' ``Count``, split over two instances by user, and emits the user's running
figures from the user and the figures alone (``by_key``: the spouts send the bolt no
events, only each user and its figures combined per batch); the sink upserts them into
``user_totals(user_id text primary key, spent bigint, events bigint)``. With millions of
users, most seen once or twice, a batch of events holds almost as many users as events:
this is the workload where combining per batch saves little, and what matters is the cost
per event and per key.

Messages that are not JSON objects with a string ``user`` and an integer ``amount`` go to
the dead-letter topic ``user_totals.dead-letter``.
"""

from typing import Any

from hailstorm import Count, Record, Sum, Table, Topology, by_key, per_key

FIGURES = Record({"spent": Sum(), "events": Count()})


def event_of(message: Any) -> list[dict[str, Any]]:
    """The event of one message; a DecodeError (dead letter) for anything else."""
    if not (isinstance(message, dict) and isinstance(message.get("user"), str)
            and type(message.get("amount")) is int):
        raise ValueError(f"not an event with a string user and an integer amount: {message!r}")
    return [message]


topology = Topology("user_totals")

events = topology.spout("events", topic="events", decoder="json", explode=event_of)

totals = topology.bolt(
    "totals",
    inputs=[events],
    key=lambda event: event["user"],
    state=per_key(FIGURES),
    lift=lambda event: {"spent": event["amount"], "events": 1},
    emit=by_key(lambda user, figures: [(user, figures["spent"], figures["events"])]),
    parallelism=2,
    preaggregate=True,
)

topology.sink(
    "user_totals",
    inputs=[totals],
    target=Table(
        "user_totals",
        columns={"user_id": "text", "spent": "bigint", "events": "bigint"},
        key=["user_id"],
        mode="upsert",
    ),
)
