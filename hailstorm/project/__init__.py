"""``hailstorm init DIR``: a working project of one's own (pure templates, one writer).

The project holds a click-analytics topology (JSON clicks; views per page and minute in a
tumbling window whose late clicks go to a table; views per user), a pytest test of it with
:func:`~hailstorm.run_model`, a producer of sample clicks and a README with the commands.
Its files are :func:`project_files`; :func:`write_project` writes them, refusing to
overwrite any.
"""

from __future__ import annotations

from pathlib import Path

from hailstorm.topology.errors import NAME_PATTERN, suggest_name

__all__ = ["project_files", "project_name", "write_project"]


def project_name(directory: Path) -> str:
    """The topology's name for a project in ``directory`` (a valid name, from its own)."""
    name = directory.resolve().name
    return name if NAME_PATTERN.match(name) else suggest_name(name)


def project_files(name: str) -> dict[str, str]:
    """Relative path -> text of every file of a project whose topology is ``name``."""
    def fill(text: str) -> str:
        return text.replace("{{name}}", name).replace("{{topic}}", f"{name}.clicks")

    return {fill(path): fill(text) for path, text in _TEMPLATES.items()}


def write_project(directory: Path) -> list[Path]:
    """Write the project into ``directory`` (created when missing); the files written.
    Raises :class:`FileExistsError` naming the first file that exists (nothing written)."""
    name = project_name(directory)
    files = {directory / path: text for path, text in project_files(name).items()}
    for path in files:
        if path.exists():
            raise FileExistsError(f"{path} exists: hailstorm init writes only new files")
    directory.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text)
    return list(files)


_TOPOLOGY = '''"""{{name}}: views per page and minute, and per user, from JSON clicks on {{topic}}.

A click is ``{"user": "u1", "page": "/home", "ts": 1700000000}`` (ts in epoch seconds).
Clicks that are not JSON objects with those fields are dead letters ({{name}}.dead-letter);
clicks that arrive after their minute closed go to the table page_minutes_late.
"""

from typing import Any

from hailstorm import Count, Table, Topology, TumblingWindow, WindowValue, per_key
from hailstorm.lateness import late_table

MINUTE = TumblingWindow(60, Count(), unit="s")


def click(event: dict[str, Any]) -> list[tuple[str, str, int]]:
    """The ``(user, page, ts)`` of one click (a missing field makes it a dead letter)."""
    return [(str(event["user"]), str(event["page"]), int(event["ts"]))]


def minute_rows(click: tuple[str, str, int], windows: WindowValue[int],
                ) -> list[tuple[str, int, int | None]]:
    """``(page, minute_start, views)`` of the minute the click falls in."""
    return [(click[1], start, windows.get(start)) for start in MINUTE.window_starts(click[2])]


topology = Topology("{{name}}")

clicks = topology.spout("clicks", topic="{{topic}}", decoder="json", explode=click)

minutes = topology.bolt(
    "minutes", inputs=[clicks], key=lambda c: c[1], state=per_key(MINUTE),
    event_time=lambda c: c[2], lift=Count.lift, emit=minute_rows,
    late=late_table("page_minutes_late"),
)

users = topology.bolt(
    "users", inputs=[clicks], key=lambda c: c[0], state=per_key(Count()),
    lift=Count.lift, emit=lambda c, views: [(c[0], views)],
)

topology.sink("page_minutes", inputs=[minutes], target=Table(
    "page_minutes", columns={"page": "text", "minute": "bigint", "views": "bigint"},
    key=["page", "minute"]))
topology.sink("user_views", inputs=[users], target=Table(
    "user_views", columns={"user_id": "text", "views": "bigint"}, key=["user_id"]))
'''

_TEST = '''"""The topology against hailstorm's reference model (run: pytest)."""

from pathlib import Path

from hailstorm import load_topology, messages, run_model

TOPOLOGY = load_topology(str(Path(__file__).with_name("{{name}}.py")))


def test_views_per_page_minute_and_user() -> None:
    clicks = [
        {"user": "ann", "page": "/home", "ts": 60},
        {"user": "bob", "page": "/home", "ts": 119},
        {"user": "ann", "page": "/about", "ts": 130},
        "not json",
        {"user": "ann", "page": "/home", "ts": 250},
        {"user": "bob", "page": "/home", "ts": 61},  # its minute closed at 180: late
    ]
    result = run_model(TOPOLOGY, messages("{{topic}}", clicks))
    assert result.table("page_minutes") == {
        ("/home", 60): {"page": "/home", "minute": 60, "views": 2},
        ("/about", 120): {"page": "/about", "minute": 120, "views": 1},
        ("/home", 240): {"page": "/home", "minute": 240, "views": 1},
    }
    assert result.table("user_views") == {
        ("ann",): {"user_id": "ann", "views": 3},
        ("bob",): {"user_id": "bob", "views": 2},
    }
    assert len(result.dead_letters) == 1
    late = list(result.table("minutes_late").values())  # the late table's sink
    assert [(row["offset"], row["window_start"]) for row in late] == [(5, 60)]
'''

_PRODUCER = '''"""Produce sample clicks to {{topic}} (Kafka at $HAILSTORM_KAFKA, as
`hailstorm dev env` exports it): python produce.py [COUNT]."""

import json
import os
import random
import sys
import time

from confluent_kafka import Producer


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    bootstrap = os.environ.get("HAILSTORM_KAFKA")
    if not bootstrap:
        sys.exit("set HAILSTORM_KAFKA (eval \\"$(hailstorm dev env)\\")")
    producer = Producer({"bootstrap.servers": bootstrap})
    rng = random.Random(1)
    now = int(time.time())
    for i in range(count):
        click = {"user": f"user{rng.randint(1, 50):03d}",
                 "page": rng.choice(["/home", "/about", "/pricing", "/docs"]),
                 "ts": now + i // 10 - rng.randint(0, 30)}
        producer.produce("{{topic}}", json.dumps(click).encode(), key=click["user"].encode())
        producer.poll(0)
    producer.flush(30)
    print(f"produced {count} clicks to {{topic}}")


if __name__ == "__main__":
    main()
'''

_README = '''# {{name}}

A hailstorm project: views per page and minute, and per user, from JSON clicks on the Kafka
topic `{{topic}}` (see `{{name}}.py`; `hailstorm show {{name}}.py` draws it).

Test it against the reference model (no services needed):

```sh
pip install pytest
pytest
```

Run it on a local stack (ZooKeeper, Kafka, PostgreSQL; `hailstorm dev up` starts them and
`eval "$(hailstorm dev env)"` points every command at them, the sink tables included):

```sh
hailstorm dev up && eval "$(hailstorm dev env)"
python produce.py 1000
hailstorm negotiator {{name}}.py &
hailstorm run {{name}}.py
```

`hailstorm status {{name}}` shows it running; `hailstorm stop {{name}}` stops it after a
last round (so does Ctrl-C of `hailstorm run`).
'''

_TEMPLATES = {
    "{{name}}.py": _TOPOLOGY,
    "test_{{name}}.py": _TEST,
    "produce.py": _PRODUCER,
    "README.md": _README,
}
