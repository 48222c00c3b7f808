"""Importing a topology module (a file path or a dotted name) and finding its
``topology``, with every failure a :class:`~hailstorm.topology.TopologyError` that names
the module and the line.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any

from hailstorm.topology.builder import Topology
from hailstorm.topology.errors import TopologyError, all_problems, collecting

__all__ = ["examples_dir", "load_topology"]


def examples_dir() -> Path:
    """The example topologies: the checkout's ``topologies/`` beside the package, else the
    copy an installed wheel ships as ``hailstorm/examples/`` (see ``setup.py``)."""
    package = Path(__file__).resolve().parents[1]
    checkout = package.parent / "topologies"
    return checkout if (checkout / "wordcount.py").is_file() else package / "examples"


def _example(ref: str) -> str | None:
    """The example a missing ``topologies/<name>.py`` (or ``<name>.py``) path names, if any:
    the repository's paths work from anywhere, also for an installed hailstorm."""
    path = Path(ref)
    if path.suffix != ".py" or path.parent.name not in ("topologies", ""):
        return None
    example = examples_dir() / path.name
    return str(example) if example.is_file() else None


def load_topology(ref: str) -> Topology:
    """Import the module ``ref`` (a file path such as ``topologies/wordcount.py`` or a
    dotted name such as ``topologies.wordcount``) and return its validated ``topology``.

    Like ``python file.py`` and ``python -m name``, the module can import its neighbours:
    the file's directory (for a path) or the current directory (for a dotted name) is
    appended to ``sys.path`` if missing. A path ``topologies/<name>.py`` that does not exist
    names the example of that name (:func:`examples_dir`). The ref is recorded as
    ``topology.source`` (and the file as ``module_file``) so that executors can load the
    same module. Every failure
    raises :class:`TopologyError`; the problems of several declarations (and of tables'
    names) are all reported in one, each naming where, what and a fix (its ``problems``).
    """
    is_path = ref.endswith(".py") or "/" in ref or os.sep in ref
    with collecting() as problems:
        try:
            module = _import_path(ref) if is_path else _import_dotted(ref)
        except TopologyError as exc:
            if not problems:
                raise
            raise all_problems([*problems, exc], ref) from None
    if problems:
        raise all_problems(problems, ref)
    topology = getattr(module, "topology", None)
    if topology is None:
        found = [n for n, v in vars(module).items() if isinstance(v, Topology)]
        fix = (
            f"add `topology = {found[0]}` at the end of the module"
            if found
            else 'define `topology = Topology("name")` at module level'
        )
        raise TopologyError("the module defines no `topology`", fix=fix, module=ref)
    if not isinstance(topology, Topology):
        raise TopologyError(
            f"`topology` is a {type(topology).__name__}, not a hailstorm Topology",
            fix='assign `topology = Topology("name")` and build it with topology.spout/bolt/sink',
            module=ref,
        )
    topology.source = ref
    topology.module_file = getattr(module, "__file__", None)
    if topology.module_file:
        topology.module_file = os.path.abspath(topology.module_file)
    try:
        topology.validate()
    except TopologyError as exc:
        exc.module = ref
        raise
    return topology


def _import_path(ref: str) -> Any:
    path = os.path.abspath(ref)
    example = None if os.path.isfile(path) else _example(ref)
    if example is not None:
        path = example
    if not os.path.isfile(path):
        raise TopologyError(
            f"no such file {ref!r} (looked in {os.getcwd()})",
            fix="check the path, or pass a dotted module name such as topologies.wordcount",
            module=ref,
        )
    stem = re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0])
    digest = hashlib.blake2b(path.encode(), digest_size=4).hexdigest()
    module_name = f"_hailstorm_topology_{stem}_{digest}"
    _ensure_on_path(os.path.dirname(path))
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise TopologyError(
            f"cannot import {ref!r} as a Python module", fix="give it a .py suffix", module=ref
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # broad: the user's module runs; TopologyError, Ctrl-C/exit as is
        sys.modules.pop(module_name, None)
        _reraise_import_failure(ref, path, exc)
    return module


def _ensure_on_path(directory: str) -> None:
    if not any(os.path.abspath(entry or ".") == directory for entry in sys.path):
        sys.path.append(directory)


def _import_dotted(ref: str) -> Any:
    _ensure_on_path(os.getcwd())
    try:
        return importlib.import_module(ref)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (ref == exc.name or ref.startswith(exc.name + ".")):
            raise TopologyError(
                f"no module named {ref!r} (current directory {os.getcwd()})",
                fix="check the spelling, run from the directory that contains the package "
                "(or add it to PYTHONPATH), or pass a file path such as topologies/x.py",
                module=ref,
            ) from exc
        _reraise_import_failure(ref, None, exc)
    except BaseException as exc:  # broad: the user's module runs; TopologyError, Ctrl-C/exit as is
        _reraise_import_failure(ref, None, exc)


def _reraise_import_failure(ref: str, path: str | None, exc: BaseException) -> Any:
    if isinstance(exc, TopologyError):
        if exc.module is None:
            exc.module = ref
        raise exc
    if isinstance(exc, KeyboardInterrupt | SystemExit):
        raise exc
    location = ""
    frames = traceback.extract_tb(exc.__traceback__)
    module_path = path if path is not None else _module_origin(ref)
    for frame in reversed(frames):
        if module_path and os.path.abspath(frame.filename) == os.path.abspath(module_path):
            location = f" at line {frame.lineno}"
            break
    raise TopologyError(
        f"importing the module failed{location}: {type(exc).__name__}: {exc}",
        fix="correct the module (`python " + (path or f"-m {ref}") + "` shows the full traceback)",
        module=ref,
    ) from exc


def _module_origin(ref: str) -> str | None:
    try:
        spec = importlib.util.find_spec(ref)
    except Exception:  # broad: find_spec imports the user's parent packages
        return None
    return spec.origin if spec is not None else None
