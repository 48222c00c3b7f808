"""``hailstorm export``: a committed round of a bolt's snapshots into a table, atomically.

A package, one concern per module; the names below are its interface (import them from
``hailstorm.export``):

* :mod:`~hailstorm.export.job` — the Spark job and the one transaction that writes the
  table and records the export (:func:`export_bolt`, :class:`BoltExport`);
* :mod:`~hailstorm.export.rounds` — which round to read: ``--epoch``, the committed one,
  or the latest complete one (:func:`choose_round`; ``hailstorm query`` reads the same);
* :mod:`~hailstorm.export.rows` — a state's table rows and columns (:func:`state_mapping`);
* :mod:`~hailstorm.export.sink_rebuild` — ``hailstorm sink rebuild``: a sink's upsert table
  and progress from the committed round (:func:`rebuild_sink`);
* :mod:`~hailstorm.export.errors` — :class:`ExportError`.
"""

from hailstorm.export.errors import ExportError
from hailstorm.export.job import (
    CHUNK_ROWS,
    BoltExport,
    ExportListener,
    ExportResult,
    RichExportListener,
    export_bolt,
    snapshot_store,
)
from hailstorm.export.rounds import Round, choose_round, complete_rounds, read_committed
from hailstorm.export.rows import StateMapping, state_mapping, to_json_text
from hailstorm.export.sink_rebuild import RebuildResult, rebuild_sink

__all__ = [
    "CHUNK_ROWS",
    "BoltExport",
    "ExportError",
    "ExportListener",
    "ExportResult",
    "RebuildResult",
    "RichExportListener",
    "Round",
    "StateMapping",
    "choose_round",
    "complete_rounds",
    "export_bolt",
    "read_committed",
    "rebuild_sink",
    "snapshot_store",
    "state_mapping",
    "to_json_text",
]
