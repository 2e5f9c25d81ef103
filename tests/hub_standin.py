"""A loopback stand-in for the Hugging Face hub: model directories served as repositories at fixed commits, through
the routes the real `huggingface_hub` client reads (a repository's info at a revision, its file tree, each file),
reached with HF_ENDPOINT. Every request is recorded, so a test can say what was fetched, at which revision, and that
nothing was."""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


def _blob_id(data: bytes) -> str:
    """The git blob id of a file's bytes, as the hub names a file's version."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class HubStandIn:
    """Serves `repos` ({repo id: (commit, directory)}, the commit its main branch is at) on 127.0.0.1, and the
    `older` commits ({repo id: (commit, directory)}) by their ids; `requests` holds (method, path) of each."""

    def __init__(self, repos: dict[str, tuple[str, Path]], host: str = "127.0.0.1",
                 older: dict[str, tuple[str, Path]] | None = None):
        self.repos = {repo: (commit, Path(folder)) for repo, (commit, folder) in repos.items()}
        self.older = {repo: (commit, Path(folder)) for repo, (commit, folder) in (older or {}).items()}
        self.requests: list[tuple[str, str]] = []
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                stand_in._answer(self, body=True)

            def do_HEAD(self):  # noqa: N802
                stand_in._answer(self, body=False)

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self._server.server_address[1]}"

    def __enter__(self) -> HubStandIn:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_) -> None:
        """Stop answering (the address then refuses connections, as a hub that cannot be reached does)."""
        if self._server.socket.fileno() != -1:
            self._server.shutdown()
            self._server.server_close()

    def fetched(self, repo: str) -> list[str]:
        """The paths of `repo`'s files that were downloaded (GET), in order."""
        return [path.split("/resolve/", 1)[1] for method, path in self.requests
                if method == "GET" and path.startswith(f"/{repo}/resolve/")]

    def _files(self, folder: Path) -> list[Path]:
        return sorted(p for p in folder.rglob("*") if p.is_file())

    def _answer(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlsplit(handler.path).path)
        self.requests.append((handler.command, handler.path))
        for repo, (commit, folder) in self.repos.items():
            for prefix, route in ((f"/api/models/{repo}/revision/", self._info),
                                  (f"/api/models/{repo}/tree/", self._tree), (f"/{repo}/resolve/", self._file)):
                if path.startswith(prefix):
                    revision, _, rest = path[len(prefix):].partition("/")
                    if repo in self.older and revision == self.older[repo][0]:
                        return route(handler, repo, *self.older[repo], rest, body)
                    if revision not in ("main", commit):
                        return self._send(handler, 404, b'{"error": "Revision Not Found"}', body,
                                          {"X-Error-Code": "RevisionNotFound", "Content-Type": "application/json"})
                    return route(handler, repo, commit, folder, rest, body)
        self._send(handler, 404, b'{"error": "Repository Not Found"}', body,
                   {"X-Error-Code": "RepoNotFound", "Content-Type": "application/json"})

    def _info(self, handler, repo, commit, folder, _rest, body) -> None:
        info = {"id": repo, "modelId": repo, "sha": commit, "private": False,
                "siblings": [{"rfilename": p.relative_to(folder).as_posix()} for p in self._files(folder)]}
        self._send(handler, 200, json.dumps(info).encode(), body, {"Content-Type": "application/json"})

    def _tree(self, handler, repo, commit, folder, _rest, body) -> None:
        tree = [{"type": "file", "path": p.relative_to(folder).as_posix(), "size": p.stat().st_size,
                 "oid": _blob_id(p.read_bytes())} for p in self._files(folder)]
        self._send(handler, 200, json.dumps(tree).encode(), body, {"Content-Type": "application/json"})

    def _file(self, handler, repo, commit, folder, rest, body) -> None:
        target = (folder / rest).resolve()
        if not target.is_file() or folder.resolve() not in target.parents:
            return self._send(handler, 404, b'{"error": "Entry Not Found"}', body,
                              {"X-Error-Code": "EntryNotFound", "Content-Type": "application/json"})
        data = target.read_bytes()
        self._send(handler, 200, data, body, {"X-Repo-Commit": commit, "ETag": f'"{_blob_id(data)}"',
                                             "Content-Type": "application/octet-stream"})

    @staticmethod
    def _send(handler, status: int, data: bytes, body: bool, headers: dict) -> None:
        handler.send_response(status)
        for name, value in headers.items():
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)
