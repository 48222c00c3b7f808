"""Generated data shaped like production, for benchmarks and chaos runs. Pure and seeded.

Two generators, both drawing from a Zipf distribution (rank ``r`` has weight ``r**-s``), so
that a few keys are hot and a long tail is written rarely, as in real text and real users:

* :class:`ZipfText`: lines of prose-like text over a large made-up vocabulary (default
  50,000 words, ``s = 1.1``), with mixed case, punctuation, contractions and numbers. A
  1,000-line batch holds a few thousand distinct words, as real prose or log tokens do.
* :class:`KeyedEvents`: JSON events ``{"user": ..., "amount": ..., "country": ...}`` over a
  large key space (default 2,000,000 users, ``s = 0.6``): most users appear once or twice,
  so pre-aggregation within a batch saves little.
* :class:`PageViews`: page views ``{"page", "user", "ts", "latency_ms"}`` (pages and users
  by Zipf's law) in event-time order with the disorder of real collection: some views are
  delayed by seconds to minutes, a few by up to half an hour (late for 5-minute windows).
* :class:`UserActivity`: page views, the ad clicks that follow some of them and changing
  user profiles, on three topics (for joins).

The same ``(parameters, seed)`` always give the same data.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["PAGE_VIEW_SCHEMA", "KeyedEvents", "PageViews", "UserActivity", "ZipfText",
           "zipf_ranks"]

_ONSETS = ("b", "br", "c", "ch", "d", "dr", "f", "g", "gr", "h", "j", "k", "l", "m", "n",
           "p", "pl", "qu", "r", "s", "sh", "st", "t", "th", "tr", "v", "w", "z")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ou", "y")
_CODAS = ("", "", "", "n", "r", "s", "t", "ck", "ng", "ll")


def zipf_ranks(rng: random.Random, n: int, exponent: float, k: int) -> list[int]:
    """``k`` ranks in ``0..n-1`` drawn by Zipf's law (rank ``r`` has weight about
    ``(r + 1) ** -exponent``).

    Inverse transform of the continuous power law on ``[1, n + 1)``, floored: O(1) per
    draw whatever ``n`` (a table lookup over millions of weights is cache-bound).
    """
    rand = rng.random
    if exponent == 1.0:
        top = math.log(n + 1)
        return [min(n - 1, int(math.exp(rand() * top)) - 1) for _ in range(k)]
    power = 1.0 - exponent
    span = (n + 1) ** power - 1.0
    inverse = 1.0 / power
    return [min(n - 1, int((1.0 + rand() * span) ** inverse) - 1) for _ in range(k)]


def _made_up_words(count: int, seed: int) -> list[str]:
    """``count`` distinct pronounceable lowercase words, shorter ones first (frequent words
    are short in real languages)."""
    rng = random.Random(seed)
    words: list[str] = []
    seen: set[str] = set()
    syllables = 1
    attempts = 0
    while len(words) < count:
        word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS)
                       for _ in range(syllables))
        attempts += 1
        if word not in seen:
            seen.add(word)
            words.append(word)
        if attempts > 40 * len(_ONSETS) * len(_VOWELS) ** syllables:
            syllables += 1  # this length is used up: go longer
            attempts = 0
    return words


@dataclass(frozen=True)
class ZipfText:
    """Text lines whose words follow Zipf's law over ``vocabulary`` words.

    Lines have ``words_per_line`` words (inclusive range). Surface forms vary as in real
    text: a line starts with a capital; about one word in eight is written otherwise
    (capitalised, upper case, followed by a comma, or as a contraction ``word's`` or
    ``word't``); one line in a hundred holds a number; lines end in ``.``, ``!`` or ``?``.
    Lowercased and
    split on non-letters (``topologies/wordcount.py``'s ``words_of``), the words are the
    vocabulary's (plus ``s`` and ``t`` from contractions).
    """

    vocabulary: int = 50_000
    exponent: float = 1.1
    words_per_line: tuple[int, int] = (4, 16)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.vocabulary < 1 or self.exponent <= 0:
            raise ValueError("ZipfText needs vocabulary >= 1 and exponent > 0")
        low, high = self.words_per_line
        if not 1 <= low <= high:
            raise ValueError(f"words_per_line must be 1 <= low <= high, not {(low, high)}")

    def words(self) -> list[str]:
        """The vocabulary, most frequent first."""
        return _made_up_words(self.vocabulary, self.seed)

    def lines(self, count: int, seed: int = 0) -> Iterator[str]:
        """``count`` lines; ``seed`` picks which lines (the vocabulary is fixed)."""
        forms = [_surface_forms(w) for w in self.words()]
        rng = random.Random(f"{self.seed}/{seed}")
        rand, randint = rng.random, rng.randint
        low, high = self.words_per_line
        ends = (".", ".", ".", "!", "?")
        block = 1_000
        for start in range(0, count, block):
            sizes = [randint(low, high) for _ in range(min(block, count - start))]
            ranks = zipf_ranks(rng, len(forms), self.exponent, sum(sizes))
            # 88% the plain form, else one of six variants (2% each).
            tokens = [forms[r][0] if (x := rand()) >= 0.12 else forms[r][1 + int(x * 50)]
                      for r in ranks]
            at = 0
            for n in sizes:
                line = tokens[at:at + n]
                at += n
                if rand() < 0.01:
                    line.insert(randint(0, n), str(randint(0, 99999)))
                first = line[0]
                line[0] = first[:1].upper() + first[1:]
                yield " ".join(line) + ends[int(rand() * 5)]


def _surface_forms(word: str) -> tuple[str, ...]:
    """``word`` as written: plain (index 0), then six variants drawn 2% of the time each."""
    capital = word[:1].upper() + word[1:]
    return (word, capital, word + ",", word + "'s", capital, word + "'t", word.upper())


@dataclass(frozen=True)
class KeyedEvents:
    """JSON events of users drawn by Zipf's law from ``keys`` users.

    Each event is ``{"user": "u0001234", "amount": <1..500>, "country": <2 letters>}``
    (UTF-8 bytes). With the default ``s = 0.6`` over 2,000,000 users, 3,000,000 events
    touch about 1.1 million distinct users, most of them once or twice.
    """

    keys: int = 2_000_000
    exponent: float = 0.6
    seed: int = 0

    def __post_init__(self) -> None:
        if self.keys < 1 or self.exponent <= 0:
            raise ValueError("KeyedEvents needs keys >= 1 and exponent > 0")

    def events(self, count: int, seed: int = 0) -> Iterator[bytes]:
        """``count`` events; ``seed`` picks which events."""
        rng = random.Random(f"{self.seed}/{seed}")
        # Ranks are scattered over ids so that hot users are not u0000000, u0000001, ...
        keys = self.keys
        stride = _coprime_stride(keys, self.seed)
        offset = random.Random(self.seed).randrange(keys)
        countries = (b"DE", b"US", b"FR", b"BR", b"IN", b"JP", b"NG", b"GB", b"CA", b"MX")
        rand = rng.random
        block = 10_000
        for start in range(0, count, block):
            for rank in zipf_ranks(rng, keys, self.exponent, min(block, count - start)):
                user = (rank * stride + offset) % keys
                yield (b'{"user": "u%07d", "amount": %d, "country": "%s"}'
                       % (user, 1 + int(rand() * 500), countries[user % 10]))


@dataclass(frozen=True)
class PageViews:
    """Page views ``{"page": "/p0001234", "user": "u0012345", "ts": <epoch ms>,
    "latency_ms": <int>}`` as dicts (encode them as the topic wants, e.g. Avro).

    Pages are drawn by Zipf's law (``page_exponent``, default 1.1) from ``pages``, users
    (``user_exponent``, 0.8) from ``users``. Event times advance ``1000 / per_second`` ms a
    view from ``start_ms``; ``delayed`` of the views (5%) carry a time from 1 s to 5 min
    older (mobile clients sending in batches), ``stragglers`` (0.5%) from 5 to 30 min older
    (a device coming back online). Latencies are log-normal around 90 ms.
    """

    pages: int = 100_000
    users: int = 1_000_000
    page_exponent: float = 1.1
    user_exponent: float = 0.8
    per_second: int = 1_000
    start_ms: int = 1_700_000_000_000
    delayed: float = 0.05
    stragglers: float = 0.005
    seed: int = 0

    def views(self, count: int, seed: int = 0) -> Iterator[dict[str, object]]:
        """``count`` views in the order they are written; ``seed`` picks which."""
        rng = random.Random(f"{self.seed}/{seed}")
        rand, gauss = rng.random, rng.gauss
        step = 1000 / self.per_second
        page_stride = _coprime_stride(self.pages, self.seed)
        user_stride = _coprime_stride(self.users, self.seed + 1)
        block = 10_000
        for first in range(0, count, block):
            n = min(block, count - first)
            pages = zipf_ranks(rng, self.pages, self.page_exponent, n)
            users = zipf_ranks(rng, self.users, self.user_exponent, n)
            for i in range(n):
                ts = self.start_ms + int((first + i) * step)
                draw = rand()
                if draw < self.stragglers:
                    ts -= 300_000 + int(rand() * 1_500_000)
                elif draw < self.stragglers + self.delayed:
                    ts -= 1_000 + int(rand() * 299_000)
                yield {"page": f"/p{pages[i] * page_stride % self.pages:07d}",
                       "user": f"u{users[i] * user_stride % self.users:07d}",
                       "ts": ts, "latency_ms": max(1, int(math.exp(4.5 + 0.6 * gauss(0, 1))))}


PAGE_VIEW_SCHEMA: dict[str, object] = {
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
"""The Avro schema of a :class:`PageViews` view (the one ``topologies/pageviews.py``
decodes with)."""


@dataclass(frozen=True)
class UserActivity:
    """Page views, ad clicks and user profiles as ``(topic, record)``, in the order written.

    Each record is a view ``{"id": "v17", "user", "page", "ts"}`` (users and pages from
    :class:`PageViews`, ``per_second`` views a second of event time, with its disorder;
    ``very_late`` of them two hours old, late for windows kept an hour), with probability
    ``clicks`` a click ``{"id": "c18", "user", "page", "ts"}`` by the user of one of the
    last 50 views, up to 2 min after it (on that view's page with probability ``on_page``),
    or with probability ``profiles`` a profile ``{"user", "version", "country", "plan"}``
    of such a user (versions 1..20 in any order, so a newer one may come first).
    """

    users: int = 20_000
    pages: int = 2_000
    per_second: int = 10
    clicks: float = 0.15
    profiles: float = 0.05
    on_page: float = 0.6
    very_late: float = 0.002
    views_topic: str = "user-views"
    clicks_topic: str = "ad-clicks"
    profiles_topic: str = "user-profiles"
    seed: int = 0

    def records(self, count: int, seed: int = 0) -> Iterator[tuple[str, dict[str, object]]]:
        """``count`` records (views, clicks and profiles together); ``seed`` picks which."""
        rng = random.Random(f"activity/{self.seed}/{seed}")
        views = PageViews(pages=self.pages, users=self.users, per_second=self.per_second,
                          seed=self.seed).views(count, seed)
        recent: list[tuple[str, str, int]] = []  # (user, page, ts) of the last views
        for i in range(count):
            draw = rng.random()
            if recent and draw < self.clicks:
                user, page, ts = rng.choice(recent)
                if rng.random() >= self.on_page:
                    page = f"/p{rng.randrange(self.pages):07d}"
                yield self.clicks_topic, {"id": f"c{i}", "user": user, "page": page,
                                          "ts": ts + rng.randrange(120_000)}
            elif recent and draw < self.clicks + self.profiles:
                yield self.profiles_topic, {"user": rng.choice(recent)[0],
                                            "version": rng.randint(1, 20),
                                            "country": rng.choice(_COUNTRIES),
                                            "plan": rng.choice(("free", "pro", "team"))}
            else:
                view = next(views)
                written = view["ts"]
                assert isinstance(written, int)
                user, page, ts = str(view["user"]), str(view["page"]), written
                if rng.random() < self.very_late:
                    ts -= 2 * 3600 * 1000
                recent = [*recent[-49:], (user, page, ts)]
                yield self.views_topic, {"id": f"v{i}", "user": user, "page": page, "ts": ts}


_COUNTRIES = ("DE", "FR", "JP", "BR", "US", "IN")


def _coprime_stride(n: int, seed: int) -> int:
    """A stride near ``0.618 n`` with ``gcd(stride, n) == 1``: ``r -> r * stride mod n``
    is then a permutation of ``0..n-1``."""
    stride = max(1, int(n * 0.6180339887) + seed % 97)
    while math.gcd(stride, n) != 1:
        stride += 1
    return stride
