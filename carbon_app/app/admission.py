"""Who gets into the queue: each client a few model jobs at most, and nobody once the server is closing.

The app runs its model jobs (every event in the `MODEL_GROUP` concurrency group: designs, scores, scans,
VCFs, loading) one at a time behind Gradio's queue, first come first served. Without a bound per client, one
visitor could queue ten scans and every other visitor would wait behind all ten. `Admission` answers a
client's new model job with a sentence (HTTP 429) while that client already holds `CARBON_JOBS_PER_CLIENT`
of them; a job stops counting when it finishes, fails, is cancelled or its tab closes. Each job being bounded
in size (`CARBON_MAX_JOB_READS`), what stands between a visitor and the model is at most that many jobs of
each client ahead. The page's own quick events (a field filled, a model's card) are never refused.

A client is its network address. Behind proxies every visitor would share the nearest proxy's address, so
with `CARBON_PROXY_HOPS` proxies in front (a Space has one) a visitor is the address the outermost proxy saw:
the entry that many from the right of `X-Forwarded-For`, which each proxy appends to and a visitor cannot
write (what a visitor sends there stands further left).

Uploads are admitted the same way (`UploadBudget`): each says its size before it is read, and is refused with
a sentence when it would take its visitor past `CARBON_UPLOAD_MB_PER_HOUR` or Gradio's upload cache past
`CARBON_UPLOADS_MAX_MB`, so no rate of uploads can fill the disk before the hourly clean-up runs.

On SIGTERM the server answers every job already in the queue with its shutting-down sentence before it
closes (`gradio_app.stop_on_sigterm`); for that last moment `Door.close()` refuses new ones at the door (HTTP
503 with the sentence), so none is left in a queue that is about to vanish.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter, defaultdict, deque
from pathlib import Path

from .results import written

#: The concurrency group of every event that runs a model (`Page.model_queue`).
MODEL_GROUP = "model"
_JOIN, _UPLOAD = "/queue/join", "/upload"
_MAX_JOIN_BYTES = 64 << 20  # a join bigger than any field allows is Gradio's to refuse; not read whole here


def client_of(peer: str, forwarded_for: str | None, hops: int) -> str:
    """The visitor's address: the peer's, or behind `hops` proxies the one the outermost proxy saw."""
    seen = [entry.strip() for entry in (forwarded_for or "").split(",") if entry.strip()]
    if not hops or not seen:
        return peer
    return seen[-min(hops, len(seen))]


def _request_client(request, hops: int) -> str:
    """`client_of` for a request in Gradio's queue."""
    return client_of(request.client.host if request.client else "unknown",
                     ",".join(request.headers.getlist("x-forwarded-for")) or None, hops)


def _scope_client(scope, hops: int) -> str:
    """`client_of` for an ASGI request."""
    forwarded = [value.decode("latin-1") for key, value in scope.get("headers", []) if key == b"x-forwarded-for"]
    return client_of(scope["client"][0] if scope.get("client") else "unknown", ",".join(forwarded) or None, hops)


def model_jobs(queue) -> list:
    """The model jobs in Gradio's queue, waiting or running."""
    waiting = queue.event_queue_per_concurrency_id.get(MODEL_GROUP)
    events = list(waiting.queue) if waiting else []
    return events + [event for running in queue.active_jobs if running for event in running
                     if event.fn.concurrency_id == MODEL_GROUP]


def model_jobs_of(queue, client: str, hops: int) -> int:
    """How many model jobs `client` has in Gradio's queue, waiting or running."""
    return sum(1 for event in model_jobs(queue) if _request_client(event.request, hops) == client)


def refusal(held: int) -> str:
    return (f"you already have {held} job{'s' if held != 1 else ''} waiting or running on this server, as many as "
            "one visitor may hold at once so that others are not kept waiting: send this one when one of them "
            "has finished, or stop one")


class UploadBudget:
    """What uploads may still take: each visitor `per_hour` bytes in any hour, the cache `max_bytes` in all.

    The cache's size is read from the disk at most every `RECOUNT_S` seconds, uploads admitted since added to
    it, so a burst is counted before its files are written."""

    RECOUNT_S = 2.0

    def __init__(self, folder: str | Path, max_bytes: int, per_hour: int, request_bytes: int):
        self.folder, self.max_bytes, self.per_hour = Path(folder), max_bytes, per_hour
        self.request_bytes = request_bytes  # the most one upload request may carry: a file and its form
        self._recent: defaultdict[str, deque] = defaultdict(deque)  # client -> (time, bytes) of the last hour
        self._counted = (-float("inf"), 0)  # (when the cache was measured, its bytes then and admitted since)
        self._lock = threading.Lock()

    def refusal(self, client: str, length: int | None) -> tuple[int, str] | None:
        """(HTTP status, sentence) for an upload of `length` bytes from `client` that may not come in, else
        None, and the upload is counted."""
        mb = 2**20
        if length is None:
            return 411, "an upload must say its size (Content-Length) before it is sent"
        if length > self.request_bytes:
            return 413, (f"an upload may carry at most {self.request_bytes / mb:.0f} MB, this one is "
                         f"{length / mb:.0f} MB: send one file at a time")
        now = time.monotonic()
        with self._lock:
            if len(self._recent) > 10_000:  # visitors of more than an hour ago are forgotten
                for gone in [who for who, times in self._recent.items() if not times or times[-1][0] < now - 3600]:
                    del self._recent[gone]
            recent = self._recent[client]
            while recent and recent[0][0] < now - 3600:
                recent.popleft()
            used = sum(size for _, size in recent)
            if used + length > self.per_hour:
                return 429, (f"you have uploaded {used / mb:.0f} MB in the last hour, and {self.per_hour / mb:.0f} "
                             "MB is as much as one visitor may: try again later, or paste the sequence instead")
            when, cached = self._counted
            if now - when > self.RECOUNT_S:
                when, cached = now, (written(self.folder)[1] if self.folder.is_dir() else 0)
            if cached + length > self.max_bytes:
                self._counted = (when, cached)
                return 507, (f"the server's space for uploads ({self.max_bytes / mb:.0f} MB) is full: try again "
                             "in an hour, when older uploads are cleared, or paste the sequence instead")
            self._counted = (when, cached + length)
            recent.append((now, length))
        return None


class Door:
    """Open until the server closes: then every job sent is refused at once (`Admission`) with `closed`, the
    sentence it gets (None while the door is open)."""

    closed: str | None = None

    def close(self, sentence: str) -> None:
        self.closed = sentence


class Admission:
    """ASGI middleware: a model job sent to the queue is refused with a sentence while its client holds `limit`
    of them, and every job once `door` is closed; an upload past `uploads` is refused before it is read. Joins
    still on their way into the queue count too, so a burst of them cannot slip past."""

    def __init__(self, app, blocks, limit: int, proxy_hops: int = 0, door: Door | None = None,
                 uploads: UploadBudget | None = None):
        self.app, self.blocks, self.limit, self.hops = app, blocks, limit, proxy_hops
        self.door, self.uploads = door or Door(), uploads
        self.joining: Counter[str] = Counter()

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"].endswith(_UPLOAD) and self.uploads:
            length = dict(scope.get("headers", [])).get(b"content-length", b"")
            # in a worker thread: a recount walks the cache folder, which the event loop must not wait on
            refused = await asyncio.to_thread(self.uploads.refusal, _scope_client(scope, self.hops),
                                              int(length) if length.isdigit() else None)
            if refused:
                await _answer(send, *refused)
                return
        queue = getattr(self.blocks, "_queue", None)  # Gradio's queue: what waits and what runs, by request
        if not (scope["type"] == "http" and scope["method"] == "POST" and scope["path"].endswith(_JOIN)
                and queue is not None):
            await self.app(scope, receive, send)
            return
        if self.door.closed:
            await _answer(send, 503, self.door.closed)
            return
        body, more = [], True
        while more:  # the join's body names the event: read it here, handed on unchanged below
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, _replay([], message), send)
                return
            body.append(message.get("body", b""))
            more = message.get("more_body", False) and sum(map(len, body)) < _MAX_JOIN_BYTES
        rest = [{"type": "http.request", "body": b"".join(body), "more_body": more}]
        if not self._runs_model(rest[0]["body"]):
            await self.app(scope, _replay(rest, receive), send)
            return
        client = _scope_client(scope, self.hops)
        held = model_jobs_of(queue, client, self.hops) + self.joining[client]
        if held >= self.limit:
            await _answer(send, 429, refusal(held))
            return
        self.joining[client] += 1
        try:
            await self.app(scope, _replay(rest, receive), send)
        finally:  # queued (or refused) by now: the queue counts it from here
            self.joining[client] -= 1
            if not self.joining[client]:
                del self.joining[client]

    def _runs_model(self, body: bytes) -> bool:
        try:
            fn = self.blocks.fns[json.loads(body)["fn_index"]]
        except (ValueError, KeyError, TypeError):
            return False  # not an event this page knows: Gradio answers it
        return fn.concurrency_id == MODEL_GROUP


def _replay(first: list[dict], then):
    """An ASGI `receive` that gives `first` (the messages already read), then whatever `then` gives."""
    pending = list(first)

    async def receive():
        if pending:
            return pending.pop(0)
        return await then() if callable(then) else then

    return receive


async def _answer(send, status: int, sentence: str) -> None:
    """A refused join: its `detail` is what Gradio's page shows (for a 429; a 503 it calls busy)."""
    body = json.dumps({"detail": sentence, "error": sentence}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"retry-after", b"10")]})
    await send({"type": "http.response.body", "body": body})
