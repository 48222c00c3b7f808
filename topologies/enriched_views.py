"""Page views enriched with user profiles, and joined with the ad clicks that follow them.

Three JSON topics:

* ``user-views``: ``{"id": "v17", "user": "u3", "page": "/home", "ts": 1700000000000}``
  (``ts``: event time, epoch milliseconds; ``id`` names the view);
* ``user-profiles``, a table kept as a (compacted) topic keyed by user:
  ``{"user": "u3", "version": 2, "country": "DE", "plan": "pro"}``; a newer ``version``
  replaces an older one, whatever the order in which they arrive;
* ``ad-clicks``: ``{"id": "c5", "user": "u3", "page": "/home", "ts": 1700000042000}``.

Two join bolts read the views (one spout tags them as the left side of both joins):

* ``user_activity``, a :class:`~hailstorm.joins.LookupJoin` (left join) of each user's
  views (count and latest view time) with the user's latest profile; the sink upserts
  ``user_activity(user_id, country, plan, views, last_view_ms)``, ``country`` and ``plan``
  NULL while no profile arrived;
* ``view_clicks``, a :class:`~hailstorm.joins.WindowJoin` (left join) of views and clicks
  of the same user in the same 10-minute window (kept an hour, so events up to an hour
  out of order still meet); the sink upserts ``view_clicks(view_id, user_id,
  window_start_ms, page, clicks, clicks_on_page)``: every view with the number of that
  user's clicks in its window, and how many were on the viewed page.

Both tables end the same whatever the order in which the three topics' records arrive. A
view or click whose window had closed (its end + 1 h) at the newest event time of its Kafka
partition before it is late: it goes to ``enriched_views.late`` instead of the join, the
same in every run (see :mod:`hailstorm.lateness`). Messages that are not such JSON objects
go to ``enriched_views.dead-letter``.
"""

from typing import Any

from hailstorm import Count, Last, Max, Record, Table, Topology
from hailstorm.joins import LookupJoin, WindowJoin

WINDOW_MS = 10 * 60 * 1000
RETENTION_MS = 60 * 60 * 1000

ACTIVITY = Record({"views": Count(), "last_ts": Max("long")})


def _fields(value: Any, types: dict[str, type]) -> dict[str, Any]:
    """``value`` if it is a JSON object with these fields of these types, else ValueError
    (the record becomes a dead letter)."""
    if not isinstance(value, dict) or not all(
        isinstance(value.get(name), kind) and not isinstance(value.get(name), bool)
        for name, kind in types.items()
    ):
        fields = ", ".join(f"{name} ({kind.__name__})" for name, kind in types.items())
        raise ValueError(f"not a JSON object with {fields}: {value!r:.80}")
    return value


def view_of(value: Any) -> list[dict[str, Any]]:
    """A page view (``id``, ``user``, ``page``: strings; ``ts``: integer)."""
    return [_fields(value, {"id": str, "user": str, "page": str, "ts": int})]


def profile_of(value: Any) -> list[dict[str, Any]]:
    """A user profile (``user``, ``country``, ``plan``: strings; ``version``: integer)."""
    return [_fields(value, {"user": str, "version": int, "country": str, "plan": str})]


def click_of(value: Any) -> list[dict[str, Any]]:
    """An ad click (``id``, ``user``, ``page``: strings; ``ts``: integer)."""
    return [_fields(value, {"id": str, "user": str, "page": str, "ts": int})]


def activity_row(user: str, activity: dict[str, Any], profile: Any) -> tuple[Any, ...]:
    """``(user_id, country, plan, views, last_view_ms)``."""
    latest = Last.value(profile) or {}
    return (user, latest.get("country"), latest.get("plan"), activity["views"],
            activity["last_ts"])


def view_clicks_row(user: str, start: int, view: dict[str, Any],
                    clicks: list[dict[str, Any]]) -> tuple[Any, ...]:
    """``(view_id, user_id, window_start_ms, page, clicks, clicks_on_page)``."""
    on_page = sum(1 for click in clicks if click["page"] == view["page"])
    return (view["id"], user, start, view["page"], len(clicks), on_page)


ACTIVITY_JOIN = LookupJoin(
    left=ACTIVITY,
    right=Last("json"),
    left_key=lambda view: view["user"],
    right_key=lambda profile: profile["user"],
    left_lift=lambda view: ACTIVITY.lift(views=Count.one, last_ts=view["ts"]),
    right_lift=lambda profile: Last.lift((profile["version"], 0), profile),
    row=activity_row,
    how="left",
)

CLICK_JOIN = WindowJoin(
    size=WINDOW_MS,
    retention=RETENTION_MS,
    unit="ms",
    left_key=lambda view: view["user"],
    right_key=lambda click: click["user"],
    left_id=lambda view: view["id"],
    right_id=lambda click: click["id"],
    left_time=lambda view: view["ts"],
    right_time=lambda click: click["ts"],
    left_value=lambda view: {"id": view["id"], "page": view["page"]},
    right_value=lambda click: {"page": click["page"]},
    row=view_clicks_row,
    how="left",
)

topology = Topology("enriched_views")

# The views are the left side of both joins: one spout feeds both.
views = topology.spout("views", topic="user-views", decoder="json",
                       explode=ACTIVITY_JOIN.left.explode(view_of))
profiles = topology.spout("profiles", topic="user-profiles", decoder="json",
                          explode=ACTIVITY_JOIN.right.explode(profile_of))
clicks = topology.spout("clicks", topic="ad-clicks", decoder="json",
                        explode=CLICK_JOIN.right.explode(click_of))

user_activity = ACTIVITY_JOIN.bolt(topology, "user_activity", inputs=[views, profiles],
                                   parallelism=2)
view_clicks = CLICK_JOIN.bolt(topology, "view_clicks", inputs=[views, clicks], parallelism=2,
                              late="enriched_views.late")

topology.sink(
    "user_activity_table",
    inputs=[user_activity],
    target=Table(
        "user_activity",
        columns={"user_id": "text", "country": "text", "plan": "text", "views": "bigint",
                 "last_view_ms": "bigint"},
        key=["user_id"],
        mode="upsert",
    ),
)
topology.sink(
    "view_clicks_table",
    inputs=[view_clicks],
    target=Table(
        "view_clicks",
        columns={"view_id": "text", "user_id": "text", "window_start_ms": "bigint",
                 "page": "text", "clicks": "bigint", "clicks_on_page": "bigint"},
        key=["view_id", "window_start_ms"],
        mode="upsert",
    ),
)
