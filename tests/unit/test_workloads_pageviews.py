"""The page-view generator (hailstorm.dev.workloads.PageViews): seeded, in event-time order with
the documented share of delayed views and stragglers, Zipf-shaped pages."""

from __future__ import annotations

from collections import Counter

from hailstorm.dev.workloads import PageViews


def test_page_views_are_seeded_and_shaped_as_documented() -> None:
    gen = PageViews()
    views = list(gen.views(50_000))
    assert views == list(PageViews().views(50_000)) != list(gen.views(50_000, seed=1))
    behind = [gen.start_ms + i - v["ts"] for i, v in enumerate(views)]  # 1 view per ms
    delayed = sum(1_000 <= b < 300_000 for b in behind) / len(views)
    stragglers = sum(b >= 300_000 for b in behind) / len(views)
    assert sum(b == 0 for b in behind) / len(views) > 0.93
    assert 0.04 < delayed < 0.06 and 0.003 < stragglers < 0.007
    assert max(behind) <= 1_800_000
    pages = Counter(v["page"] for v in views)
    top = pages.most_common(1)[0][1]
    assert top > 50 * (len(views) / len(pages))  # a hot page, and a long tail
    assert all(v["latency_ms"] >= 1 and v["user"].startswith("u") for v in views)
