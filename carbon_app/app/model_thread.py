"""One thread for all model work in the app.

PyTorch runs its CPU kernels on an OpenMP thread team that belongs to the
thread calling them. Gradio calls each handler, and each step of a streaming
one, from a worker of its own thread pool, which starts and retires threads as
it goes, so the app grew a team per worker. Once the teams' threads outnumber
the cores, GNU OpenMP stops spinning between parallel regions, and each of the
thousands of small regions a request runs waits for its helper threads to wake.
On 2 cores the same variant score took 40-55% longer in the app than in a
script. Every call that touches a model therefore runs on this one thread
(loading included), which keeps one team, as a script has.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from ..core.stopping import Stopped, stoppable

_NAME = "carbon-model"
# re-entrant: a call made from a finalizer that runs while this thread starts the model thread must not wait
# on itself
_lock = threading.RLock()
_worker: tuple[int, queue.SimpleQueue] | None = None  # (the process it belongs to, the model thread's tasks)


def _work(tasks: queue.SimpleQueue) -> None:
    while True:
        future, context, fn, args, kwargs = tasks.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            result = context.run(fn, *args, **kwargs)
        except BaseException as error:  # noqa: BLE001 - the caller gets it back, whatever it is
            future.set_exception(error)
        else:
            future.set_result(result)
        del future, context, fn, args, kwargs  # nothing of a finished task kept alive while waiting for the next


def _tasks() -> queue.SimpleQueue:
    """The model thread's task queue, the thread started on first use in each process (a forked worker, as a
    ZeroGPU call runs in, gets its own: the parent's thread does not exist there)."""
    global _worker
    worker = _worker
    if worker is not None and worker[0] == os.getpid():
        return worker[1]
    with _lock:
        if _worker is None or _worker[0] != os.getpid():
            tasks = queue.SimpleQueue()
            threading.Thread(target=_work, args=(tasks,), name=_NAME, daemon=True).start()
            _worker = (os.getpid(), tasks)
        return _worker[1]


def call(fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)` on the model thread, with the caller's context (Gradio's progress reads it).

    Handing the task over takes no lock (a SimpleQueue's put is safe to re-enter): a stream dropped
    without being closed is closed by the garbage collector wherever it runs, which can be in the middle
    of another call's hand-over, and its close is a call too. A pool's submit holds a lock there, and
    such a close, waiting on that same lock, hung the thread and, with it, every later request."""
    if threading.current_thread().name == _NAME:  # already there: a nested call runs in place
        return fn(*args, **kwargs)
    future: Future = Future()
    _tasks().put((future, contextvars.copy_context(), fn, args, kwargs))
    return future.result()


def on_model_thread(fn: Callable) -> Callable:
    """`fn` (a function or a generator function) run on the model thread, each step of a generator too;
    closing the generator (a cancelled or disconnected stream) closes `fn`'s there."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def steps(*args, **kwargs):
            inner = call(fn, *args, **kwargs)  # a generator object: nothing has run yet
            done = object()
            try:
                while (item := call(next, inner, done)) is not done:
                    yield item
            finally:
                call(inner.close)
        return steps

    @functools.wraps(fn)
    def run(*args, **kwargs):
        return call(fn, *args, **kwargs)
    return run


#: how often a job that is still running lets the page's queue see whether its tab is still open
HEARTBEAT_S = 2.0
# a thread per running request's step: in this process they wait on the model thread; with a server each runs
# its request there, so there are enough for every request the queue lets through at once
_step_threads = ThreadPoolExecutor(max_workers=260, thread_name_prefix="carbon-step")


def stops_when_dropped(fn: Callable, heartbeat=None) -> Callable:
    """`fn` (run on the model thread: `on_model_thread`) as an async generator that stops its job when the
    request is dropped: a cancel (Gradio cancels the awaiting task) or a closed tab (the queue stops asking
    for the next update; `heartbeat` is yielded every HEARTBEAT_S while a step runs so it gets the chance).
    The job is told through `core.stopping` and stops at its next checkpoint, freeing the model thread
    within a batch instead of running to its end for nobody. A plain function's one result is its last
    update."""
    streams = inspect.isgeneratorfunction(fn)

    @functools.wraps(fn)
    async def run(*args, **kwargs):
        asked, lock, done = threading.Event(), threading.Lock(), object()
        steps = fn(*args, **kwargs) if streams else None

        def step():
            with lock, stoppable(asked):
                if steps is None:
                    return fn(*args, **kwargs), True
                item = next(steps, done)
                return item, item is done

        finished, waiting = False, None
        try:
            while not finished:
                waiting = asyncio.wrap_future(_step_threads.submit(contextvars.copy_context().run, step))
                while not waiting.done():
                    await asyncio.wait({waiting}, timeout=HEARTBEAT_S)
                    if not waiting.done():
                        yield heartbeat
                try:
                    item, finished = waiting.result()
                except Stopped:
                    return
                if item is not done:
                    yield item
        finally:
            if not finished:
                asked.set()
                if waiting is not None:  # nobody reads the dropped step's end (its `Stopped`, or an error the
                    # handler has already logged): taken here, not logged as "never retrieved" when it is collected
                    waiting.add_done_callback(lambda step_ended: step_ended.cancelled() or step_ended.exception())
                if steps is not None:  # closed once its running step has stopped, off the event loop
                    _step_threads.submit(_close_after, lock, steps)
    return run


def _close_after(lock: threading.Lock, steps) -> None:
    with lock:
        steps.close()
