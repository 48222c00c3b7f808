"""State that evolved: may state of one monoid be read as another's
(:func:`evolution_problem`: the same monoids but for Record fields added or removed and
numbers promoted), can records written with one schema be read with another
(:func:`resolution_problem`, the rules of the Avro specification that fastavro applies when
reading with a reader schema), and the reader schema of a monoid's snapshot records, where
a :class:`~hailstorm.monoids.Record` field the old state lacks defaults to that field's
identity (:func:`reader_schema`), and whether a file is read with it, from the file's
header (:func:`evolved_reader`). Pure.
"""

from __future__ import annotations

import ast
from typing import Any

from fastavro.schema import expand_schema

from hailstorm.monoids import KeyedMap, Monoid, Record
from hailstorm.snapshots.format import SnapshotMismatchError, SnapshotRef, _check_monoid, _Header
from hailstorm.snapshots.layouts import LAYOUT_WHOLE, written_schema

__all__ = ["evolution_problem", "evolved_reader", "reader_schema", "resolution_problem",
           "snapshot_record_schema"]

_PROMOTIONS = {
    "int": {"int", "long", "float", "double"},
    "long": {"long", "float", "double"},
    "float": {"float", "double"},
    "string": {"string", "bytes"},
    "bytes": {"bytes", "string"},
}


def snapshot_record_schema(monoid: Monoid[Any]) -> dict[str, Any]:
    """The schema of ``monoid``'s snapshot records (as :mod:`hailstorm.snapshots.format`
    writes them): a keyed map's ``{key, value}`` entry, else a ``{state}`` record."""
    schema = monoid.avro_schema()
    if isinstance(monoid, KeyedMap) and isinstance(schema, dict) \
            and isinstance(schema.get("items"), dict):
        return dict(schema["items"])
    return {"type": "record", "name": "hailstorm.snapshot.State",
            "fields": [{"name": "state", "type": schema}]}


def reader_schema(monoid: Monoid[Any]) -> dict[str, Any]:
    """:func:`snapshot_record_schema` with each Record field's identity as its default, so
    that a snapshot written before the field existed reads with the field empty (defaults
    are the Avro values themselves, as fastavro fills them in: bytes stay bytes)."""
    record = snapshot_record_schema(monoid)
    inner = monoid.inner if isinstance(monoid, KeyedMap) else monoid
    field = "value" if isinstance(monoid, KeyedMap) else "state"
    fields = [dict(f) for f in record["fields"]]
    for f in fields:
        if f["name"] == field:
            f["type"] = _with_defaults(inner, f["type"])
    return {**record, "fields": fields}


def _with_defaults(monoid: Monoid[Any], schema: Any) -> Any:
    if not isinstance(monoid, Record) or not isinstance(schema, dict):
        return schema
    fields = []
    for f in schema.get("fields", []):
        m = monoid.fields.get(f["name"])
        if m is None:
            fields.append(f)
            continue
        fields.append({**f, "type": _with_defaults(m, f["type"]),
                       "default": m.to_avro(m.empty())})
    return {**schema, "fields": fields}


def resolution_problem(writer: Any, reader: Any) -> str | None:
    """Why data written with ``writer`` cannot be read with ``reader`` (None: it can)."""
    try:
        return _problem(expand_schema(writer), expand_schema(reader), "")
    except Exception as exc:  # an invalid schema is a problem, not a crash of the plan
        return f"invalid schema ({exc})"


def _type(schema: Any) -> str:
    if isinstance(schema, list):
        return "union"
    if isinstance(schema, dict):
        return str(schema["type"]) if not isinstance(schema["type"], dict | list) \
            else _type(schema["type"])
    return str(schema)


def _short(name: Any) -> str:
    return str(name).rsplit(".", 1)[-1]


def _problem(w: Any, r: Any, where: str) -> str | None:
    wt, rt = _type(w), _type(r)
    at = f" at {where}" if where else ""
    if wt == "union":
        for branch in w:
            problem = _problem(branch, r, where)
            if problem:
                return problem
        return None
    if rt == "union":
        if any(_problem(w, branch, where) is None for branch in r):
            return None
        return f"{wt}{at} matches no branch of the new union"
    if wt != rt:
        if rt in _PROMOTIONS.get(wt, ()):
            return None
        return f"{wt}{at} cannot be read as {rt}"
    if wt == "record":
        if _short(w.get("name")) != _short(r.get("name")):
            return f"record {w.get('name')}{at} cannot be read as record {r.get('name')}"
        old = {f["name"]: f for f in w.get("fields", [])}
        for f in r.get("fields", []):
            path = f"{where}.{f['name']}" if where else f["name"]
            if f["name"] in old:
                problem = _problem(old[f["name"]]["type"], f["type"], path)
                if problem:
                    return problem
            elif "default" not in f:
                return f"new field {path} has no default"
        return None
    if wt == "array":
        return _problem(w["items"], r["items"], f"{where}[]")
    if wt == "map":
        return _problem(w["values"], r["values"], f"{where}{{}}")
    if wt == "enum":
        missing = set(w.get("symbols", ())) - set(r.get("symbols", ()))
        if missing and "default" not in r:
            return f"enum{at} lost the symbols {sorted(missing)}"
        return None
    if wt == "fixed" and w.get("size") != r.get("size"):
        return f"fixed{at} of size {w.get('size')} cannot be read as size {r.get('size')}"
    return None


_PROMOTED = {("int", "long"), ("int", "double"), ("long", "double"), ("float", "double"),
             ("int", "float"), ("long", "float")}


def _structure_problem(old: ast.expr, new: ast.expr) -> str | None:
    if isinstance(old, ast.Name) and isinstance(new, ast.Name):
        same = old.id == new.id or (old.id, new.id) in _PROMOTED
        return None if same else f"{old.id} is not {new.id}"
    if isinstance(old, ast.Constant) and isinstance(new, ast.Constant):
        return None if old.value == new.value else f"{old.value!r} is not {new.value!r}"
    if isinstance(old, ast.Tuple) and isinstance(new, ast.Tuple):  # a tuple key's parts
        if len(old.elts) != len(new.elts):
            return f"{ast.unparse(old)} is not {ast.unparse(new)}"
        for a, b in zip(old.elts, new.elts, strict=True):
            if problem := _structure_problem(a, b):
                return problem
        return None
    if not (isinstance(old, ast.Call) and isinstance(new, ast.Call)):
        return f"{ast.unparse(old)} is not {ast.unparse(new)}"
    name = ast.unparse(old.func)
    if name != ast.unparse(new.func) or len(old.args) != len(new.args):
        return f"{ast.unparse(old)} is not {ast.unparse(new)}"
    for a, b in zip(old.args, new.args, strict=True):
        if problem := _structure_problem(a, b):
            return problem
    old_kw = {k.arg: k.value for k in old.keywords}
    new_kw = {k.arg: k.value for k in new.keywords}
    if name != "Record" and set(old_kw) != set(new_kw):
        return f"{ast.unparse(old)} is not {ast.unparse(new)}"
    for key in set(old_kw) & set(new_kw):
        if problem := _structure_problem(old_kw[key], new_kw[key]):
            return problem
    return None


def evolution_problem(old_monoid: str, writer: Any, new_monoid: str, reader: Any) -> str | None:
    """Why state of ``old_monoid`` (a ``describe()``) written with schema ``writer`` cannot
    be read as state of ``new_monoid`` with schema ``reader`` (None: it can). It can when
    the monoids are the same but for a Record gaining fields (read as their identity) or
    losing some, and numbers promoted (``int`` -> ``long`` -> ``double``), and Avro schema
    resolution agrees; a Count is never a Sum, whatever their schemas say."""
    try:
        old_tree = ast.parse(old_monoid, mode="eval").body
        new_tree = ast.parse(new_monoid, mode="eval").body
    except SyntaxError:
        return f"{old_monoid} and {new_monoid} cannot be compared"
    problem = _structure_problem(old_tree, new_tree)
    if problem:
        return f"{old_monoid} cannot become {new_monoid} ({problem})"
    schema_problem = resolution_problem(writer, reader)
    if schema_problem:
        return f"{old_monoid} cannot be read as {new_monoid} ({schema_problem})"
    return None


def evolved_reader(ref: SnapshotRef, header: _Header, monoid: Monoid[Any], *,
                   converting: bool) -> Any:
    """The reader schema of ``ref``'s state (its ``{key, value}`` entries when keyed) as
    ``monoid``'s state: None when written for that monoid (or read as written, to be
    converted with the same layout); the monoid's schema with identity defaults when Avro
    schema resolution carries the old records; else :class:`SnapshotMismatchError`."""
    try:
        _check_monoid(ref, header, monoid)
        return None
    except SnapshotMismatchError as mismatch:
        if converting and (ref.layout == LAYOUT_WHOLE) == (not isinstance(monoid, KeyedMap)):
            return None
        reader = reader_schema(monoid)
        problem = evolution_problem(ref.monoid, written_schema(ref.layout, header.meta),
                                    monoid.describe(), reader)
        if problem is not None:
            raise SnapshotMismatchError(f"{mismatch} ({problem})") from None
        return reader
