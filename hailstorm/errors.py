"""The error family: every error hailstorm raises on purpose derives from
:class:`HailstormError`, through the one kind a user acts on.

=====================  ==================================================================
kind                   what to do
=====================  ==================================================================
:class:`DefinitionError`    the topology module is wrong: fix the declaration it names
:class:`RecordError`        one record made a user function (or the state, or a row) fail:
                            the topology's ``on_error`` decides (quarantine or stop)
:class:`HaltError`          the topology stopped on purpose, with the reason in the message
:class:`ConfigurationError` a setting, a URL or the cluster's size is wrong: fix the setting
:class:`ServiceError`       ZooKeeper, Kafka, the database, the snapshot store or a peer
                            failed or cannot be reached: the message names which
:class:`ProtocolError`      a peer, a record in ZooKeeper or a frame broke the protocol (a
                            bug, or someone who should not be talking to hailstorm)
=====================  ==================================================================

Each concrete error keeps the built-in base it had (``RuntimeError``, ``ValueError``), so
code that caught those still does. Exceptions used for control flow inside the runtime
(``RestartRequired``, ``Preempted``, ``ArchiveUnsupported``) are not errors and stay
outside the family. This module imports nothing: every layer may use it.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "DefinitionError",
    "HailstormError",
    "HaltError",
    "ProtocolError",
    "RecordError",
    "ServiceError",
]


class HailstormError(Exception):
    """Root of every error hailstorm raises on purpose: ``except HailstormError`` catches
    hailstorm's failures and nothing else."""


class DefinitionError(HailstormError):
    """A topology (or a declaration in it) is invalid."""


class RecordError(HailstormError):
    """One record made a user function, the state or a table row fail."""


class HaltError(HailstormError):
    """The topology stopped on purpose (``on_error="fail"``, a sink behind its clock, the
    driver's restart budget spent...)."""


class ConfigurationError(HailstormError):
    """A setting, URL, environment variable or cluster size is wrong."""


class ServiceError(HailstormError):
    """A service hailstorm depends on failed or cannot be reached."""


class ProtocolError(HailstormError):
    """A peer, a ZooKeeper record or a frame broke the protocol."""
