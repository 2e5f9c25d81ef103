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

import contextvars
import functools
import inspect
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

_NAME = "carbon-model"
_lock = threading.Lock()
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (the process it belongs to, the pool of one thread)


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None or _pool[0] != os.getpid():  # a forked worker (a ZeroGPU call) starts its own thread
            _pool = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix=_NAME))
        return _pool[1]


def call(fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)` on the model thread, with the caller's context (Gradio's progress reads it)."""
    if threading.current_thread().name.startswith(_NAME):  # already there: a nested call runs in place
        return fn(*args, **kwargs)
    context = contextvars.copy_context()
    return _executor().submit(context.run, fn, *args, **kwargs).result()


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
