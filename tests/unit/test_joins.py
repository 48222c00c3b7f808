"""Joins on monoid state (hailstorm/joins.py, the Events monoid, topologies/enriched_views.py)
against direct computations, in every arrival order of the topics' partitions."""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import product
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hailstorm import Count, Last, Message, Table, Topology, load_topology, messages, run_model
from hailstorm.joins import LookupJoin, WindowJoin
from hailstorm.monoids import Events
from hailstorm.testing import avro_round_trip, check_monoid_laws, states_of

TOPOLOGIES = Path(__file__).resolve().parents[2] / "topologies"
EXAMPLE = load_topology(str(TOPOLOGIES / "enriched_views.py"))
WINDOW_MS = 10 * 60 * 1000


def interleave(streams: Sequence[Sequence[Message]], rnd: random.Random) -> list[Message]:
    """The streams merged in a random order that keeps each stream's own order (what a
    consumer of several partitions may see)."""
    heads = [list(s) for s in streams if s]
    merged: list[Message] = []
    while heads:
        i = rnd.randrange(len(heads))
        merged.append(heads[i].pop(0))
        if not heads[i]:
            heads.pop(i)
    return merged


def partitioned(topic: str, values: Sequence[Any], partitions: int,
                where: Any = None) -> list[list[Message]]:
    """``values`` spread over ``partitions`` (by ``where(value)``, else round robin)."""
    spread: list[list[Any]] = [[] for _ in range(partitions)]
    for i, value in enumerate(values):
        spread[(where(value) if where else i) % partitions].append(value)
    return [messages(topic, vs, partition=p) for p, vs in enumerate(spread)]


# ------------------------------------------------------------------------------ Events

json_values = st.one_of(
    st.none(), st.booleans(), st.integers(-100, 100), st.text(max_size=3),
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(0, 9), max_size=2),
)


def test_events_obeys_the_monoid_laws() -> None:
    monoid = Events("json", id_type="long")
    lifted = st.builds(Events.lift, st.integers(0, 6), json_values)
    check_monoid_laws(monoid, states_of(monoid, lifted), max_examples=100)
    keyed = Events("double", id_type=("string", "long"))
    lifted_keyed = st.builds(Events.lift, st.tuples(st.sampled_from("ab"), st.integers(0, 3)),
                             st.floats(-5, 5, allow_nan=False))
    check_monoid_laws(keyed, states_of(keyed, lifted_keyed), max_examples=100)


def test_one_id_with_two_values_ends_the_same_in_either_order() -> None:
    e = Events("json", id_type="long")
    a, b = e.lift(1, {"v": 1}), e.lift(1, {"v": 2})
    assert e.combine(a, b) == e.combine(b, a) == {1: {"v": 2}}
    assert e.combine(e.lift(1, 1), e.lift(1, True)) == e.combine(e.lift(1, True), e.lift(1, 1))


def test_a_tie_is_decided_the_same_after_a_snapshot_reorders_a_dict() -> None:
    # Found by the monoid laws: ties went by repr, which depends on a dict's key order,
    # and a snapshot's JSON codec sorts the keys.
    e = Events("json", id_type="long")
    fresh, restored = {0: {"0": 0, "": 0}}, {0: {"": 0, "0": 0}}
    assert e.combine(fresh, {0: {"": 0}}) == e.combine(restored, {0: {"": 0}})


@pytest.mark.parametrize("value, error", [
    ({1: (1, 2)}, ValueError),          # a tuple comes back from JSON as a list
    ({1: {"t": {1, 2}}}, ValueError),   # a set is no JSON
    ({"1": "x"}, TypeError),            # the id is not a long
    ([1], TypeError),                   # not a dict at all
])
def test_events_refuses_values_its_snapshot_cannot_hold(value: Any, error: type) -> None:
    with pytest.raises(error):
        Events("json", id_type="long").check(value)


def test_events_state_survives_an_avro_snapshot() -> None:
    e = Events("json", id_type=("string", "long"))
    state = {("v", 1): {"page": "/a", "n": [1, 2]}, ("v", 0): None}
    assert avro_round_trip(e, state) == state


# ------------------------------------------------------------------ the example topology


def views_profiles_clicks(seed: int, n_views: int, n_clicks: int, users: int,
                          versions: int) -> tuple[list[dict[str, Any]], ...]:
    rnd = random.Random(seed)
    views = [{"id": f"v{i}", "user": f"u{rnd.randrange(users)}", "page": f"/p{rnd.randrange(3)}",
              "ts": rnd.randrange(40 * 60 * 1000)} for i in range(n_views)]
    profiles = [{"user": f"u{rnd.randrange(users)}", "version": rnd.randrange(versions),
                 "country": rnd.choice(["DE", "FR", "JP"]), "plan": rnd.choice(["free", "pro"])}
                for _ in range(users * 2)]
    clicks = [{"id": f"c{i}", "user": f"u{rnd.randrange(users)}", "page": f"/p{rnd.randrange(3)}",
               "ts": rnd.randrange(40 * 60 * 1000)} for i in range(n_clicks)]
    return views, profiles, clicks


def expected_activity(views: list[dict[str, Any]],
                      profiles: list[dict[str, Any]]) -> dict[tuple[str], dict[str, Any]]:
    """``user_activity`` computed directly: the profile of the highest version wins (ties:
    the greater sorted fields, as ``Last`` breaks them)."""
    latest: dict[str, dict[str, Any]] = {}
    for p in profiles:
        current = latest.get(p["user"])
        if current is None or (p["version"], sorted(p.items())) > (current["version"],
                                                                   sorted(current.items())):
            latest[p["user"]] = p
    table: dict[tuple[str], dict[str, Any]] = {}
    for user in sorted({v["user"] for v in views}):
        mine = [v for v in views if v["user"] == user]
        profile = latest.get(user, {})
        table[(user,)] = {"user_id": user, "country": profile.get("country"),
                          "plan": profile.get("plan"), "views": len(mine),
                          "last_view_ms": max(v["ts"] for v in mine)}
    return table


def expected_view_clicks(views: list[dict[str, Any]],
                         clicks: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """``view_clicks`` computed directly: a view meets the clicks of its user and window."""
    table = {}
    for v in views:
        start = v["ts"] - v["ts"] % WINDOW_MS
        mine = [c for c in clicks if c["user"] == v["user"] and
                c["ts"] - c["ts"] % WINDOW_MS == start]
        table[(v["id"], start)] = {
            "view_id": v["id"], "user_id": v["user"], "window_start_ms": start,
            "page": v["page"], "clicks": len(mine),
            "clicks_on_page": sum(c["page"] == v["page"] for c in mine)}
    return table


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), order=st.randoms(use_true_random=False),
       users=st.integers(1, 6), versions=st.integers(1, 4))
def test_enriched_views_match_a_direct_join_in_any_arrival_order(
    seed: int, order: random.Random, users: int, versions: int
) -> None:
    views, profiles, clicks = views_profiles_clicks(seed, 40, 25, users, versions)
    streams = [*partitioned("user-views", views, 2), *partitioned("user-profiles", profiles, 2),
               *partitioned("ad-clicks", clicks, 2)]
    result = run_model(EXAMPLE, interleave(streams, order))
    assert not result.dead_letters
    assert result.table("user_activity_table") == expected_activity(views, profiles)
    assert result.table("view_clicks_table") == expected_view_clicks(views, clicks)
    again = run_model(EXAMPLE, [m for s in streams for m in s])  # topic after topic
    for bolt in ("user_activity", "view_clicks"):
        assert result.instance_states(bolt) == again.instance_states(bolt)


def test_enriched_views_quarantine_records_of_the_wrong_shape() -> None:
    batch = messages("user-views", [{"id": "v1", "user": "u1", "page": "/", "ts": "noon"}])
    batch += messages("user-profiles", [{"user": "u1", "version": True, "country": "DE",
                                         "plan": "pro"}, [1, 2]])
    batch += messages("ad-clicks", [{"id": "c1", "user": "u1", "page": "/", "ts": 5}])
    result = run_model(EXAMPLE, batch)
    assert [(d.node, d.message.offset, d.stage) for d in result.dead_letters] == [
        ("views", 0, "explode"), ("profiles", 0, "explode"), ("profiles", 1, "explode")]
    assert result.table("user_activity_table") == {}
    assert result.table("view_clicks_table") == {}


def test_enriched_views_state_survives_an_avro_snapshot() -> None:
    views, profiles, clicks = views_profiles_clicks(3, 30, 30, 4, 3)
    result = run_model(EXAMPLE, messages("user-views", views) +
                       messages("user-profiles", profiles) + messages("ad-clicks", clicks))
    for bolt in result.topology.bolts:
        for state in result.instance_states(bolt.name):
            assert avro_round_trip(bolt.state, state) == state


# ------------------------------------------------------------------------ inner joins


def pairs_topology(slide: int | None) -> Topology:
    """Orders and payments of a customer in the same (sliding) window: one row per pair."""
    join = WindowJoin(
        size=100, slide=slide, retention=1000, how="inner",
        left_key=lambda o: o["customer"], right_key=lambda p: p["customer"],
        left_id=lambda o: o["id"], right_id=lambda p: p["id"],
        left_time=lambda o: o["t"], right_time=lambda p: p["t"],
        row=lambda customer, start, o, p: (start, o["id"], p["id"], customer))
    topology = Topology("pairs")
    orders = topology.spout("orders", topic="orders", decoder="json",
                            explode=join.left.explode())
    payments = topology.spout("payments", topic="payments", decoder="json",
                              explode=join.right.explode())
    joined = join.bolt(topology, "joined", inputs=[orders, payments], parallelism=3,
                       late="drop")  # a closed window loses its stragglers (tested below)
    topology.sink("pairs", inputs=[joined], target=Table(
        "pairs", columns={"window_start": "bigint", "order_id": "text", "payment_id": "text",
                          "customer": "text"},
        key=["window_start", "order_id", "payment_id"], mode="upsert"))
    return topology


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), order=st.randoms(use_true_random=False),
       slide=st.sampled_from([None, 25, 50]))
def test_inner_window_join_emits_every_pair_in_any_arrival_order(
    seed: int, order: random.Random, slide: int | None
) -> None:
    rnd = random.Random(seed)
    orders = [{"id": f"o{i}", "customer": rnd.choice("ab"), "t": rnd.randrange(500)}
              for i in range(20)]
    payments = [{"id": f"p{i}", "customer": rnd.choice("abc"), "t": rnd.randrange(500)}
                for i in range(20)]
    streams = [*partitioned("orders", orders, 2), *partitioned("payments", payments, 3)]
    topology = pairs_topology(slide)
    result = run_model(topology, interleave(streams, order))
    window = topology.node("joined").window  # type: ignore[union-attr]
    expected = {
        (s, o["id"], p["id"]): {"window_start": s, "order_id": o["id"], "payment_id": p["id"],
                                "customer": o["customer"]}
        for o, p in product(orders, payments) if o["customer"] == p["customer"]
        for s in set(window.window_starts(o["t"])) & set(window.window_starts(p["t"]))
    }
    assert result.table("pairs") == expected


def test_a_window_join_loses_the_events_of_a_window_already_closed() -> None:
    """A payment for a window its customer's later orders closed makes no row (the window
    monoid's expiry; see hailstorm.joins): the model shows exactly which."""
    topology = pairs_topology(None)
    batch = messages("orders", [{"id": "o1", "customer": "a", "t": 10},
                                {"id": "o2", "customer": "a", "t": 5000}])
    batch += messages("payments", [{"id": "p1", "customer": "a", "t": 20},
                                   {"id": "p2", "customer": "a", "t": 5050}])
    result = run_model(topology, batch)
    assert set(result.table("pairs")) == {(5000, "o2", "p2")}


# ------------------------------------------------------------------------ lookup joins


def test_inner_lookup_join_emits_only_keys_with_both_sides() -> None:
    join = LookupJoin(
        left=Count(), right=Last("string"), how="inner",
        left_key=lambda v: v["user"], right_key=lambda p: p["user"],
        left_lift=lambda v: 1, right_lift=lambda p: Last.lift((p["version"], 0), p["name"]),
        row=lambda user, n, name: (user, Last.value(name), n))
    topology = Topology("inner_lookup")
    views = topology.spout("views", topic="views", decoder="json", explode=join.left.explode())
    names = topology.spout("names", topic="names", decoder="json", explode=join.right.explode())
    joined = join.bolt(topology, "joined", inputs=[views, names])
    topology.sink("rows", inputs=[joined], target=Table(
        "rows", columns={"user": "text", "name": "text", "views": "bigint"}, key=["user"]))
    batch = messages("views", [{"user": "a"}, {"user": "b"}, {"user": "a"}])
    batch += messages("names", [{"user": "a", "version": 1, "name": "Ann"},
                                {"user": "c", "version": 1, "name": "Cid"}])
    result = run_model(topology, batch)
    assert result.table("rows") == {("a",): {"user": "a", "name": "Ann", "views": 2}}
    assert [t for _o, t in result.sink_rows("rows")] == [("a", "Ann", 2)]


def test_a_join_quarantines_tuples_of_no_side() -> None:
    join = LookupJoin(left=Count(), right=Count(), left_key=str, right_key=str,
                      left_lift=lambda _v: 1, right_lift=lambda _v: 1,
                      row=lambda k, a, b: (k, a, b))
    topology = Topology("untagged")
    words = topology.spout("words", topic="words", decoder="text")  # not tagged
    join.bolt(topology, "joined", inputs=[words])
    result = run_model(topology, messages("words", ["a"]))
    assert [(d.node, d.stage) for d in result.dead_letters] == [("joined", "key")]
    assert "join.left.explode" in result.dead_letters[0].error


def test_join_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="how must be one of"):
        LookupJoin(left=Count(), right=Count(), left_key=str, right_key=str,
                   left_lift=str, right_lift=str, row=print, how="outer")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="right_key must be a function"):
        LookupJoin(left=Count(), right=Count(), left_key=str, right_key="user",  # type: ignore[arg-type]
                   left_lift=str, right_lift=str, row=print)
