"""Stopping a long job: a cancel, a closed tab or a shutdown asks, the job obeys where it can keep its work.

Whoever runs a job (the app's handlers) hands it a `threading.Event` through `stoppable`; the engine calls
`checkpoint()` between batches (a scan's windows, a VCF's variants), which raises `Stopped` once the event is
set. A batch is seconds of work at most, so a job stops within a few seconds of being asked, and what it
finished before is its caller's to keep.

A shutdown (SIGTERM to the app or the command line) is asked of the whole process: `shut_down(why)` lets
each job finish the unit it can keep whole (a VCF's chunk of records: `boundary()` raises there), and
`shut_down(why, now=True)`, once the grace is over or on a second signal, stops every job at its next
checkpoint, as a cancel does. Jobs the process counts with `job()` are what `wait_for_jobs` waits on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_asked: ContextVar[threading.Event | None] = ContextVar("carbon_stop", default=None)
_lock = threading.Lock()
_shutdown: dict[str, str | bool | None] = {"why": None, "now": False}  # why the process is shutting down
_jobs = [0]  # jobs running in this process (`job()`), what a shutdown waits for


class Stopped(Exception):  # noqa: N818 - what happened, as the job's caller reads it
    """The job was asked to stop and stopped at a checkpoint (`at_once`) or at a boundary of what it keeps."""

    def __init__(self, why: str, at_once: bool = True):
        super().__init__(f"stopped: {why}")
        self.why, self.at_once = why, at_once

    @property
    def cancelled(self) -> bool:
        """Stopped for its own request (a cancel, a closed tab), not for a shutdown: nobody waits for it."""
        return self.why == "cancelled"


@contextmanager
def stoppable(asked: threading.Event) -> Iterator[threading.Event]:
    """Run the block as a job that stops at its next checkpoint once `asked` is set."""
    token = _asked.set(asked)
    try:
        yield asked
    finally:
        _asked.reset(token)


def checkpoint() -> None:
    """Raise `Stopped` if the running job was asked to stop, or the process to stop at once."""
    asked = _asked.get()
    if asked is not None and asked.is_set():
        raise Stopped("cancelled")
    if _shutdown["now"]:
        raise Stopped(f"shutdown on {_shutdown['why']}")


def boundary() -> None:
    """Between two units a job keeps whole: raise `Stopped` (not `at_once`) once the process shuts down."""
    checkpoint()
    if _shutdown["why"]:
        raise Stopped(f"shutdown on {_shutdown['why']}", at_once=False)


def shut_down(why: str, now: bool = False) -> None:
    """Ask every job of the process to stop: at its next boundary, or with `now` at its next checkpoint."""
    with _lock:
        _shutdown["why"] = _shutdown["why"] or why
        _shutdown["now"] = _shutdown["now"] or now


def shutting_down() -> str | None:
    """Why the process is shutting down (e.g. "SIGTERM"), or None."""
    return _shutdown["why"]  # type: ignore[return-value]


def shutdown_refusal(what: str) -> str:
    """What a job sent while the process shuts down is told."""
    return f"the server is shutting down ({_shutdown['why']}): send {what} again in a minute, once it is back"


def carry_on() -> None:
    """Forget a shutdown that was asked (a process that stays up after all: tests, a notebook)."""
    with _lock:
        _shutdown.update(why=None, now=False)


@contextmanager
def job() -> Iterator[None]:
    """Count the block as a running job of this process (what `wait_for_jobs` waits on)."""
    with _lock:
        _jobs[0] += 1
    try:
        yield
    finally:
        with _lock:
            _jobs[0] -= 1


def running_jobs() -> int:
    return _jobs[0]


def wait_for_jobs(seconds: float) -> bool:
    """Wait until no job runs, at most `seconds`; whether none does."""
    deadline = time.monotonic() + seconds
    while _jobs[0] and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _jobs[0]
