"""The error family (issue 43): one root a user can catch, one kind per way to act."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hailstorm
from hailstorm.errors import (
    ConfigurationError,
    DefinitionError,
    HailstormError,
    HaltError,
    ProtocolError,
    RecordError,
    ServiceError,
)

ROOT = Path(__file__).resolve().parents[2]
CONTROL_FLOW = {"RestartRequired", "TopologyStopped", "Preempted", "ArchiveUnsupported"}
"""Exceptions the runtime raises to steer itself, not to report a failure."""
CLI_ONLY = {"CommandError"}
"""click's exit message of a command: never reaches a user's code."""
KINDS = (ConfigurationError, DefinitionError, HaltError, ProtocolError, RecordError,
         ServiceError)


def _exception_classes() -> list[tuple[str, str]]:
    """``(module path, class name)`` of every class under hailstorm/ whose
    name says it is an error (ends in Error, Halt, Halted, Violation, Unreachable...) or
    that derives from a built-in exception."""
    found = []
    for package in ("hailstorm",):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = {ast.unparse(b) for b in node.bases}
                builtin = bases & {"Exception", "RuntimeError", "ValueError", "AssertionError",
                                   "OSError", "KeyError", "TypeError"}
                if builtin or node.name.endswith(("Error", "Halt", "Halted")):
                    found.append((str(path.relative_to(ROOT)), node.name))
    return found


def _import(module_path: str, name: str) -> type:
    module = module_path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    return getattr(__import__(module, fromlist=[name]), name)


@pytest.mark.parametrize(("module", "name"), _exception_classes())
def test_every_error_is_a_hailstorm_error_of_one_kind(module: str, name: str) -> None:
    cls = _import(module, name)
    if not isinstance(cls, type) or not issubclass(cls, BaseException):
        return  # a class named *Error that is not an exception (none today)
    if name in CLI_ONLY:
        return
    if name in CONTROL_FLOW:
        assert not issubclass(cls, HailstormError), f"{name} is control flow, not an error"
        return
    assert issubclass(cls, HailstormError), f"{module}: {name} is outside the error family"
    if cls is not HailstormError and cls not in KINDS:
        kinds = [k.__name__ for k in KINDS if issubclass(cls, k)]
        assert kinds or name in {"QueryError", "HarnessError", "ProcessorFailed"}, (
            f"{module}: {name} derives from HailstormError but from none of its kinds")


def test_the_family_is_exported_and_catches_what_users_meet() -> None:
    assert hailstorm.HailstormError is HailstormError
    assert issubclass(hailstorm.TopologyError, DefinitionError)
    assert issubclass(hailstorm.DecodeError, RecordError)
    assert issubclass(hailstorm.RecordHalt, HaltError)
    from hailstorm.sinks.errors import DatabaseUnavailableError, SinkConfigError
    assert issubclass(DatabaseUnavailableError, ServiceError)
    assert issubclass(SinkConfigError, ConfigurationError)
    # the built-in bases stay, so existing handlers still catch them
    assert issubclass(hailstorm.RecordHalt, RuntimeError)
