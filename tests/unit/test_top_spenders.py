"""topologies/top_spenders.py (the two-stage pipeline) against a direct Python computation."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from hailstorm import Message, Topology, load_topology, messages, run_model
from hailstorm.dev.workloads import KeyedEvents

TOPOLOGY = Path(__file__).resolve().parents[2] / "topologies" / "top_spenders.py"


@pytest.fixture(scope="module")
def topology() -> Topology:
    return load_topology(str(TOPOLOGY))


def top_spenders(values: list[Any], top: int = 10) -> dict[tuple[str, int], dict[str, Any]]:
    """The table by hand: per (country, user) totals of the valid events, then each
    country's ``top`` users by total descending, ties by user id."""
    totals: dict[str, dict[str, int]] = defaultdict(dict)
    for value in values:
        try:
            event = json.loads(value)
        except (TypeError, ValueError):
            continue
        if not (isinstance(event, dict) and isinstance(event.get("user"), str)
                and type(event.get("amount")) is int and event["amount"] >= 0
                and isinstance(event.get("country"), str)):
            continue
        users = totals[event["country"]]
        users[event["user"]] = users.get(event["user"], 0) + event["amount"]
    table = {}
    for country, users in totals.items():
        best = sorted(users.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
        for rank, (user, spent) in enumerate(best, start=1):
            table[(country, rank)] = {"country": country, "rank": rank, "user_id": user,
                                      "spent": spent}
    return table


def spread(values: list[Any], partitions: int) -> list[Message]:
    """``values`` round-robin over ``partitions`` of ``events``, as the benchmark produces."""
    return [Message("events", i % partitions, i // partitions,
                    v if isinstance(v, bytes) else json.dumps(v).encode())
            for i, v in enumerate(values)]


BAD = [b"\xff not utf-8", b"[]", b'{"user": "u1", "amount": 5}',
       b'{"user": "u1", "amount": -5, "country": "DE"}',
       b'{"user": "u1", "amount": 2.5, "country": "DE"}']


def test_the_table_is_each_countrys_top_ten_of_the_totals(topology: Topology) -> None:
    values: list[Any] = [*KeyedEvents(keys=400).events(4_000, seed=3), *BAD]
    result = run_model(topology, spread(values, 4))
    expected = top_spenders(values)
    assert len(expected) == 100  # ten countries, each with more than ten users
    assert result.table("top_spenders") == expected
    assert [d.stage for d in result.dead_letters] == ["decode", *["explode"] * 4]


def test_the_table_does_not_depend_on_arrival_order(topology: Topology) -> None:
    """Partitions interleave differently in every run; shuffling the messages (which
    reorders events of the same partition too) leaves the table the same."""
    msgs = spread(list(KeyedEvents(keys=150).events(1_500, seed=5)), 4)
    first = run_model(topology, msgs).table("top_spenders")
    rng = random.Random(7)
    for _ in range(3):
        shuffled = msgs[:]
        rng.shuffle(shuffled)
        assert run_model(topology, shuffled).table("top_spenders") == first


def test_a_user_ranks_in_each_country_by_what_they_spent_there(topology: Topology) -> None:
    events = [
        {"user": "ann", "amount": 10, "country": "DE"},
        {"user": "bob", "amount": 7, "country": "DE"},
        {"user": "ann", "amount": 5, "country": "FR"},
        {"user": "bob", "amount": 7, "country": "FR"},
        {"user": "cid", "amount": 3, "country": "DE"},
        {"user": "cid", "amount": 4, "country": "DE"},
    ]
    result = run_model(topology, messages("events", events))
    assert {key: (row["user_id"], row["spent"])
            for key, row in result.table("top_spenders").items()} == {
        ("DE", 1): ("ann", 10),
        ("DE", 2): ("bob", 7),  # bob and cid tie at 7: by user id
        ("DE", 3): ("cid", 7),
        ("FR", 1): ("bob", 7),
        ("FR", 2): ("ann", 5),
    }
    assert result.bolt_state("totals") == {
        ("DE", "ann"): 10, ("DE", "bob"): 7, ("DE", "cid"): 7,
        ("FR", "ann"): 5, ("FR", "bob"): 7,
    }


def test_a_country_keeps_only_its_top_ten(topology: Topology) -> None:
    events = [{"user": f"u{i:02d}", "amount": i, "country": "JP"} for i in range(1, 16)]
    events += [{"user": "u01", "amount": 100, "country": "JP"}]  # from last to first
    result = run_model(topology, messages("events", events))
    ranking = [(row["rank"], row["user_id"], row["spent"])
               for _, row in sorted(result.table("top_spenders").items())]
    assert ranking == [(1, "u01", 101), *[(r, f"u{17 - r:02d}", 17 - r) for r in range(2, 11)]]
