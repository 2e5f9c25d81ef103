"""Sign-in (CARBON_AUTH): the pairs Gradio's `auth` takes, and the sign-in page made to say nothing of the API.

Gradio answers a visitor who has not signed in with its sign-in page, and that page's HTML carries
`window.gradio_api_info`: every named endpoint with its parameters and defaults, and with them the served
models' and genomes' names, which `/gradio_api/info` refuses the same visitor with a 401.
`HideApiSignedOut` empties that script on the sign-in page only (the page whose config says
`auth_required`), so nothing before sign-in says more than the sign-in form.
"""

from __future__ import annotations

import re

from ..errors import InputError

_SIGNED_OUT = re.compile(rb'"auth_required"\s*:\s*true')
_API_INFO = re.compile(rb"window\.gradio_api_info\s*=\s*.*?;\s*</script>", re.S)


def sign_ins(text: str | None) -> list[tuple[str, str]] | None:
    """`CARBON_AUTH` (`USER:PASSWORD`, comma-separated for several) as Gradio's `auth` pairs; None when unset.
    A malformed entry is named by its user and position only: the password never reaches a message or a log."""
    if not text or not text.strip():
        return None
    pairs = []
    for i, entry in enumerate(text.split(","), start=1):
        user, sep, password = entry.strip().partition(":")
        if not sep or not user.strip() or not password:
            who = f"'{user.strip()}'" if sep and user.strip() else f"number {i}"
            raise InputError(f"CARBON_AUTH entry {who} is not USER:PASSWORD (entries are separated by commas)")
        pairs.append((user.strip(), password))
    return pairs


class HideApiSignedOut:
    """ASGI middleware: a GET answered with the sign-in page goes out with `window.gradio_api_info = {}`."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "GET":
            await self.app(scope, receive, send)
            return
        start, body = None, []

        async def held(message):
            nonlocal start
            if message["type"] == "http.response.start":
                kind = dict(message.get("headers", [])).get(b"content-type", b"")
                if not kind.startswith(b"text/html"):
                    start = False  # not a page: passed on as it comes
                    await send(message)
                    return
                start = message
                return
            if start is False or message["type"] != "http.response.body":
                await send(message)
                return
            body.append(message.get("body", b""))
            if message.get("more_body"):
                return
            page = b"".join(body)
            if _SIGNED_OUT.search(page):
                page = _API_INFO.sub(b"window.gradio_api_info = {};</script>", page, count=1)
            headers = [(key, value) for key, value in start["headers"] if key.lower() != b"content-length"]
            await send({**start, "headers": [*headers, (b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, held)
