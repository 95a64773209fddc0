"""The exceptions of zoe: one class per zoe_status, so that a failed C call only translates.

Every call whose zoe_status is not ZOE_SUCCESS raises the class of its status, carrying the status
number and the text of zoe_last_error() (which names the config key, the module, the path...).
Classes whose meaning Python already has a builtin for also derive from it, so that code catching
OSError, MemoryError or TimeoutError catches zoe's too.
"""

import builtins

__all__ = [
    "Error",
    "InternalError",
    "UsageError",
    "ConfigError",
    "IOError",
    "CorruptError",
    "MemoryError",
    "DeviceError",
    "CommError",
    "TimeoutError",
    "error_for_status",
]


class Error(Exception):
    """A failed zoe call: `status` is its zoe_status, `message` zoe_last_error()'s text."""

    status = -1

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def __reduce__(self):
        # Pickles (multiprocessing, pytest-xdist) rebuild the same class with the same fields.
        return (type(self), (self.message, self.status))

    def __str__(self):
        # The message alone, also for the classes deriving from OSError (IOError, TimeoutError),
        # whose own __str__ would read (message, status) as (errno, strerror).
        return self.message


class InternalError(Error):
    """ZOE_ERROR_INTERNAL: a bug in zoe (an invariant did not hold)."""

    status = 1


class UsageError(Error):
    """ZOE_ERROR_USAGE: a bad argument, handle, size or dtype, or a call out of order."""

    status = 2


class ConfigError(Error):
    """ZOE_ERROR_CONFIG: a configuration key has a wrong type, value or combination."""

    status = 3


class IOError(Error, builtins.OSError):  # noqa: A001 (zoe.IOError is ZOE_ERROR_IO by design)
    """ZOE_ERROR_IO: a file operation failed (the message names the path and offset)."""

    status = 4


class CorruptError(Error):
    """ZOE_ERROR_CORRUPT: stored data (swap file, checkpoint) failed its integrity check."""

    status = 5


class MemoryError(Error, builtins.MemoryError):  # noqa: A001
    """ZOE_ERROR_MEMORY: out of memory in some tier (device budget, pinned host, arena)."""

    status = 6


class DeviceError(Error):
    """ZOE_ERROR_DEVICE: the compute device failed."""

    status = 7


class CommError(Error):
    """ZOE_ERROR_COMM: a collective failed."""

    status = 8


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001
    """ZOE_ERROR_TIMEOUT: a bounded wait ran out."""

    status = 9


_BY_STATUS = {
    cls.status: cls
    for cls in (
        InternalError,
        UsageError,
        ConfigError,
        IOError,
        CorruptError,
        MemoryError,
        DeviceError,
        CommError,
        TimeoutError,
    )
}


def error_for_status(status, message):
    """The exception for a failed call's status; a status this version does not know is a plain
    Error (a newer library may add statuses)."""
    cls = _BY_STATUS.get(status)
    if cls is None:
        return Error(message, status)
    return cls(message)
