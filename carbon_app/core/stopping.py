"""Stopping a long job at its next checkpoint: a cancel, a closed tab or a shutdown asks, the job obeys.

Whoever runs a job (the app's handlers, the command line on SIGTERM) hands it a `threading.Event` through
`stoppable`; the engine calls `checkpoint()` between batches (a scan's windows, a VCF's variants), which
raises `Stopped` once the event is set. A batch is seconds of work at most, so a job stops within a few
seconds of being asked, and what it finished before is its caller's to keep.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_asked: ContextVar[threading.Event | None] = ContextVar("carbon_stop", default=None)


class Stopped(Exception):  # noqa: N818 - what happened, as the job's caller reads it
    """The job was asked to stop and stopped at a checkpoint."""


@contextmanager
def stoppable(asked: threading.Event) -> Iterator[threading.Event]:
    """Run the block as a job that stops at its next checkpoint once `asked` is set."""
    token = _asked.set(asked)
    try:
        yield asked
    finally:
        _asked.reset(token)


def checkpoint() -> None:
    """Raise `Stopped` if the running job was asked to stop (nothing outside a stoppable job)."""
    asked = _asked.get()
    if asked is not None and asked.is_set():
        raise Stopped("stopped as asked")
