"""A sink's table across an upgrade (pure): its definition as the driver records it
(:func:`table_definition`) and how two definitions differ (:func:`table_changes`).

A sink's progress says which rows its table holds. A table whose definition changed is a
new table, so the progress of the old one cannot be kept with it: the plan rebuilds it from
the committed state (``--rebuild SINK``) or refuses (:mod:`hailstorm.upgrade.plan`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hailstorm.topology import Table
from hailstorm.topology.tables import normalize_type

__all__ = ["table_changes", "table_definition"]


def table_definition(table: Table) -> dict[str, Any]:
    """What makes ``table`` the table it is, as JSON data: its name, each column's type
    (lower case, without size), its key and mode. Not its URL (where it is, not what)."""
    return {"name": table.name,
            "columns": {c: normalize_type(t) for c, t in table.columns.items()},
            "key": list(table.key), "mode": table.mode}


def _key(columns: Any) -> str:
    return "(" + ", ".join(columns or ()) + ")"


def table_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Each way the definition ``new`` differs from ``old``, as a phrase (none: the same
    table). Column order does not count, as it does not for a table the sink checks."""
    changes: list[str] = []
    if old.get("name") != new.get("name"):
        changes.append(f"now table {new.get('name')} (was {old.get('name')})")
    old_columns: Mapping[str, str] = old.get("columns") or {}
    new_columns: Mapping[str, str] = new.get("columns") or {}
    for column, sql_type in new_columns.items():
        if column not in old_columns:
            changes.append(f"column {column} ({sql_type}) added")
        elif old_columns[column] != sql_type:
            changes.append(f"column {column} is {sql_type} (was {old_columns[column]})")
    changes.extend(f"column {column} removed" for column in old_columns
                   if column not in new_columns)
    if set(old.get("key") or ()) != set(new.get("key") or ()):
        changes.append(f"key {_key(new.get('key'))} (was {_key(old.get('key'))})")
    if old.get("mode") != new.get("mode"):
        changes.append(f"mode {new.get('mode')} (was {old.get('mode')})")
    return changes
