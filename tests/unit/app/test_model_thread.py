"""The app's model thread: every handler that runs a model runs on one thread, whichever thread calls it."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import gc
import os
import signal
import threading
import time
from concurrent.futures import Future

import pytest

from carbon_app.app import model_thread
from carbon_app.app.model_thread import on_model_thread

WHO = contextvars.ContextVar("who", default=None)


def _in_threads(fn, n: int = 4) -> list:
    """`fn()` called from `n` fresh threads, one after another (as a server's worker pool calls handlers)."""
    out = []
    for _ in range(n):
        thread = threading.Thread(target=lambda: out.append(fn()))
        thread.start()
        thread.join()
    return out


def test_calls_from_many_threads_all_run_on_one_thread_with_the_callers_context():
    @on_model_thread
    def where(tag):
        return threading.get_ident(), WHO.get(), tag

    def caller():
        WHO.set(threading.get_ident())  # as Gradio sets its event's context in the worker before calling
        return where("x"), threading.get_ident()

    calls = _in_threads(caller)
    assert len({ran for (ran, _, _), _ in calls}) == 1  # one thread ran them all
    assert all(ran != caller_id for (ran, _, _), caller_id in calls)  # and it is none of the callers
    assert all(seen == caller_id for (_, seen, _), caller_id in calls)  # each saw its caller's context
    assert where.__name__ == "where"


def test_a_generators_steps_run_on_the_model_thread_and_closing_it_closes_the_generator_there():
    ran, closed = [], []

    @on_model_thread
    def stream(n):
        try:
            for i in range(n):
                ran.append(threading.get_ident())
                yield i
        finally:
            closed.append(threading.get_ident())

    assert list(stream(3)) == [0, 1, 2]
    steps = stream(10)
    assert next(steps) == 0
    steps.close()  # a cancelled or disconnected stream
    assert len(set(ran + closed)) == 1 and len(closed) == 2 and threading.get_ident() not in ran


def test_errors_come_back_to_the_caller_and_a_nested_call_does_not_wait_on_itself():
    @on_model_thread
    def inner():
        return threading.get_ident()

    @on_model_thread
    def outer():
        return inner(), threading.get_ident()

    @on_model_thread
    def broken():
        raise ValueError("the message")

    nested, own = outer()
    assert nested == own
    with pytest.raises(ValueError, match="the message"):
        broken()
    assert inner() == own  # the thread survives an error


def test_a_stream_dropped_unclosed_and_collected_inside_another_call_does_not_hang_the_thread(monkeypatch):
    """A server may drop a cancelled stream's generator without closing it. The garbage collector then
    closes it wherever it runs, which can be inside another call's hand-over to the model thread, and
    closing it is a call too: with a pool's submit (which holds a lock there) the app hung for good."""
    closed = []

    @on_model_thread
    def stream():
        try:
            yield 1
            yield 2
        finally:
            closed.append(threading.get_ident())

    steps = stream()
    next(steps)
    cycle = [steps]
    cycle.append(cycle)
    del steps, cycle  # unreachable now; only the cycle collector frees it
    armed, plain_init = [True], Future.__init__

    def collecting_init(self, *args, **kwargs):  # the collector runs here, as it may at any allocation
        plain_init(self, *args, **kwargs)
        if armed:
            armed.clear()
            gc.collect()

    monkeypatch.setattr(Future, "__init__", collecting_init)
    gc.disable()  # no collection before the one placed above
    try:
        caller = threading.Thread(target=model_thread.call, args=(int, "1"), daemon=True)
        caller.start()
        caller.join(30)
    finally:
        gc.enable()
    assert not armed, "the hand-over made no future"
    assert not caller.is_alive(), "the call waits forever for the model thread"
    assert len(closed) == 1 and closed[0] == model_thread.call(threading.get_ident)  # closed, on the model thread


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_process_gets_a_model_thread_of_its_own():
    """A ZeroGPU Space runs GPU handlers in a forked process, where the parent's thread does not exist."""
    before = model_thread.call(threading.get_ident)
    pid = os.fork()
    if pid == 0:  # the child: a call must run (on a new thread), not wait forever on the parent's
        signal.alarm(20)  # a wait that would never end ends the child instead
        try:
            os._exit(0 if model_thread.call(lambda: 42) == 42 else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert model_thread.call(threading.get_ident) == before


def _long_job(ran: list, steps: int = 400):
    """A job of `steps` 10-ms batches with a checkpoint between them; `ran` counts the batches done."""
    from carbon_app.core.stopping import checkpoint

    for _ in range(steps):
        checkpoint()
        time.sleep(0.01)
        ran.append(1)
    return "finished"


def test_a_cancelled_job_stops_at_its_next_checkpoint_and_frees_the_model_thread(monkeypatch):
    monkeypatch.setattr(model_thread, "HEARTBEAT_S", 0.1)
    ran: list = []
    handler = model_thread.stops_when_dropped(on_model_thread(lambda: _long_job(ran)), heartbeat="tick")

    async def cancel_after(seconds: float) -> list:
        seen = []

        async def consume():
            async for update in handler():
                seen.append(update)
        task = asyncio.create_task(consume())
        await asyncio.sleep(seconds)
        task.cancel()  # as Gradio cancels a request's task (the Stop button, the API's cancel)
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return seen

    seen = asyncio.run(cancel_after(0.5))
    asked_at = time.perf_counter()
    assert model_thread.call(int, "1") == 1  # the model thread is free again ...
    assert time.perf_counter() - asked_at < 1.0  # ... within a batch or two, not after the job's 4 s
    assert 10 < len(ran) < 100 and "finished" not in seen and "tick" in seen  # heartbeats while it ran


def test_a_stream_dropped_between_updates_stops_its_job_and_is_closed_on_the_model_thread(monkeypatch):
    monkeypatch.setattr(model_thread, "HEARTBEAT_S", 0.1)
    ran, closed = [], []

    def stream():
        try:
            yield "first"
            yield _long_job(ran)
        finally:
            closed.append(threading.get_ident())

    handler = model_thread.stops_when_dropped(on_model_thread(stream), heartbeat="tick")

    async def drop_after_heartbeats() -> list:
        updates, seen = handler(), []
        async for update in updates:  # as a closed tab's queue does: no more asking after a heartbeat
            seen.append(update)
            if seen.count("tick") == 3:
                break
        await updates.aclose()
        return seen

    assert asyncio.run(drop_after_heartbeats())[:2] == ["first", "tick"]
    assert model_thread.call(int, "1") == 1
    for _ in range(100):  # the close is handed to the model thread once the stopped step is out of it
        if closed:
            break
        time.sleep(0.01)
    assert closed == [model_thread.call(threading.get_ident)] and len(ran) < 100


def test_a_job_that_is_not_dropped_runs_to_its_end():
    ran: list = []
    handler = model_thread.stops_when_dropped(on_model_thread(lambda: _long_job(ran, steps=5)), heartbeat="tick")

    async def collect() -> list:
        return [update async for update in handler()]

    assert asyncio.run(collect())[-1] == "finished" and len(ran) == 5
