"""The registry of open zoe handles, and their teardown at interpreter exit.

An engine left open would leave its swap files behind and its pinned memory held, so every object
that owns a C handle registers here when it opens and unregisters when it closes; at exit the ones
still open are closed in dependency order: streams (an engine refuses to close while streams of
the device it opened are alive), then engines (before the devices they run on), then devices, then
models. Objects are kept alive by the registry until they close, so garbage collection never
destroys a handle at a moment the program did not choose (engine destruction is collective across
ranks and must not depend on when each rank's collector runs). A forked child starts with none.
"""

import atexit
import os
import sys
import threading

from . import _capi
from .errors import UsageError

# Teardown order at exit: lower first.
STREAM, ENGINE, DEVICE, MODEL = range(4)

_lock = threading.Lock()
_open = {}  # id(obj) -> (order, obj), in the order opened


def register(obj, order):
    with _lock:
        _open[id(obj)] = (order, obj)


def unregister(obj):
    with _lock:
        _open.pop(id(obj), None)


def close_all():
    """Closes every handle still open, streams first and models last, the newest first within a
    kind; a failure is reported on stderr and the others are still closed."""
    with _lock:
        pending = list(_open.values())
    pending.reverse()
    pending.sort(key=lambda entry: entry[0])  # stable: newest first within a kind
    for _, obj in pending:
        try:
            obj.close()
        except Exception as e:  # noqa: BLE001 (exit must go on closing the rest)
            print(f"zoe: at exit, closing {obj!r} failed: {e}", file=sys.stderr)


def _forget_in_child():
    # A forked child shares the parent's handles only by copy: closing them at the child's exit
    # would remove the swap files the parent is still using.
    global _lock
    _lock = threading.Lock()
    _open.clear()


class Handle:
    """What Device, Stream, Model and Engine share: a C handle (None once closed) that
    `_destroy` (the zoe_*_destroy function's name) destroys at close(), idempotently, and `with`
    closing it. A subclass registers itself once its handle is open."""

    _destroy = None
    _handle = None

    def _require_open(self):
        if self._handle is None:
            raise UsageError(f"this zoe.{type(self).__name__} is closed")
        return self._handle

    @property
    def closed(self):
        return self._handle is None

    def close(self):
        """Destroys the handle (idempotent)."""
        if self._handle is None:
            return
        _capi.call(self._destroy, self._handle)
        self._handle = None
        unregister(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


atexit.register(close_all)
os.register_at_fork(after_in_child=_forget_in_child)
