"""The status document drawn with rich (pure): :func:`render`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _fmt(value: Any, suffix: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}{suffix}"
    if isinstance(value, int):
        return f"{value:,}{suffix}"
    return f"{value}{suffix}"


def _megabytes(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.0f} MiB"


def render(doc: Mapping[str, Any]) -> Any:
    """A rich renderable of the status document."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    parts: list[Any] = []
    master = doc.get("master")
    head = Text()
    head.append(f"{doc['topology']}  ", style="bold")
    colour = "green" if doc["state"] == "Flowing" else (
        "yellow" if doc["state"] in ("Flowing(C)", "SpoutsPaused") else
        "blue" if doc.get("stopped") else "red")
    head.append(doc["state"], style=f"bold {colour}")
    if master is not None:
        head.append(f"  epoch {master['epoch']}  for {_fmt(master['age_s'], ' s')}"
                    f"  leader {master['leader'] or '-'}")
    parts.append(head)
    if doc.get("waiting"):  # nothing below is current
        parts.append(Text(doc["problems"][0], style="bold yellow"))
    if master is not None and master.get("reason"):
        parts.append(Text(f"  {master['reason']}", style="dim"))
    committed = doc.get("committed")
    if committed is None:
        parts.append(Text("committed: nothing yet"))
    else:
        confirmed = committed.get("confirmed_age_s")
        still = "" if confirmed is None else \
            f"; nothing read since (checked {_fmt(confirmed, ' s')} ago)"
        parts.append(Text(f"committed: round {committed['epoch']}, "
                          f"{_fmt(committed['age_s'], ' s')} ago{still}"))
        for node, clock in (committed.get("catching_up") or {}).items():
            parts.append(Text(f"  {node} catching up on its own clock, at {clock}"))
    for neg in doc.get("negotiators", []):
        parts.append(Text(
            f"negotiator {neg['id']} {'(leader) ' if neg['leader'] else ''}"
            f"metrics {neg['host']}:{neg['metrics'] or '-'}  rounds committed "
            f"{_fmt(neg['rounds_committed'])}  recoveries {_fmt(neg['recoveries'])}",
            style="dim"))

    table = Table("partition", "committed", "position", "log end", "lag", title_justify="left",
                  title="partitions", caption=doc.get("lag_note"), caption_justify="left")
    for row in doc["partitions"]:
        end = _fmt(row["log_end"]) + ("!" if row.get("log_end_below_read") else "")
        table.add_row(row["partition"], _fmt(row["committed"]), _fmt(row["position"]), end,
                      _fmt(row["lag"]))
    parts.append(table)

    procs = Table("processor", "state", "address", "pid", "in", "out", "in/s", "out/s",
                  "cpu", "memory", "keys", "rows", "bad", "late", title="processors",
                  title_justify="left",
                  caption="cpu: of one core, between the two scrapes; memory: resident; "
                  "keys: distinct keys a bolt holds; rows: rows a sink committed since "
                  "it started (an upsert counts every write of a key); bad: records "
                  "quarantined (dead letters, <table>_rejected rows); late: tuples a spout "
                  "sent to a bolt's late topic",
                  caption_justify="left")
    for p in doc["processors"]:
        state = p["state"] or "missing"
        if p["error"]:
            state = f"[red]error[/]: {p['error']}"
        elif p.get("waiting"):
            state = f"[yellow]waiting[/] for {p['waiting']}"
        elif not p["registered"] and doc.get("stopped"):
            state = "stopped"
        elif not p["registered"]:
            state = "[red]missing[/]"
        procs.add_row(p.get("label") or p["id"], state, p["address"] or "-", str(p["pid"] or "-"),
                      _fmt(p["messages_in"]), _fmt(p["messages_out"]), _fmt(p["in_per_s"]),
                      _fmt(p["out_per_s"]), _fmt(p.get("cpu_percent"), " %"),
                      _megabytes(p.get("memory_bytes")), _fmt(p["state_keys"]),
                      _fmt(p["rows_committed"]),
                      _fmt(p.get("quarantined")), _fmt(p.get("late")))
    parts.append(procs)

    if doc["snapshots"]:
        snaps = Table("bolt / sink", "round", "committed", "size", "duration", "ref",
                      title="last snapshots", title_justify="left")
        for s in doc["snapshots"]:
            snaps.add_row(s["processor"], str(s["epoch"]), "yes" if s["committed"] else "no",
                          _fmt(s["size_bytes"], " B"), _fmt(s["duration_s"], " s"), s["ref"])
        parts.append(snaps)
    recoveries = [r for r in doc.get("recoveries", []) if not r["start"]]
    if recoveries:
        last = recoveries[-1]
        parts.append(Text(f"last recovery: round {last['epoch']}, "
                          f"{_fmt(last['age_s'], ' s')} ago: {last['reason']}", style="dim"))
    for problem in doc.get("problems", []):
        parts.append(Text(f"warning: {problem}", style="yellow"))
    return Group(*parts)
