"""A loopback server speaking the Hugging Face Hub's download API, for engines started with HF_ENDPOINT.

It serves model repositories from local snapshot directories (the tiny models the tests build), as the Hub
answers huggingface_hub: a repository's info and file tree under /api/models/, each file under
/{repo}/resolve/{revision}/{path} (HEAD for its metadata, GET for its content), a 404 with the Hub's error
code for a file a repository does not have. It counts what it was asked for: every GET of a file's content
is a download, so a test can tell whether an engine found the model in its cache.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.parse
from collections import Counter
from pathlib import Path
from types import TracebackType


class Hub:
    """Repositories (id: snapshot directory) on a loopback port; `downloads` counts GETs per (repo, path)."""

    def __init__(self, repositories: dict[str, Path], host: str = "127.0.0.1") -> None:
        self.repositories = repositories
        self.commits = {repo: hashlib.sha1(repo.encode()).hexdigest() for repo in repositories}
        self.downloads: Counter[tuple[str, str]] = Counter()
        self.requests: list[str] = []
        self._guard = threading.Lock()
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_HEAD(self) -> None:
                hub.answer(self, body=False)

            def do_GET(self) -> None:
                hub.answer(self, body=True)

            def log_message(self, *args: object) -> None:
                return

        self.server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Hub:
        self.thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()

    def files(self, repo: str) -> list[str]:
        root = self.repositories[repo]
        return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and not p.name.startswith("."))

    def answer(self, handler: http.server.BaseHTTPRequestHandler, body: bool) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(handler.path).path)
        with self._guard:
            self.requests.append(f"{handler.command} {path}")
        if path.startswith("/api/models/"):
            self.api(handler, path.removeprefix("/api/models/"))
            return
        repo, resolve, rest = self.split(path, "/resolve/")
        if repo is None or not resolve:
            self.send(handler, 404, b"", {"X-Error-Code": "RepoNotFound"})
            return
        _revision, _, name = rest.partition("/")
        file = self.repositories[repo] / name
        if not name or name not in self.files(repo):
            self.send(handler, 404, b"", {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": self.commits[repo]})
            return
        content = file.read_bytes()
        headers = {
            "X-Repo-Commit": self.commits[repo],
            "ETag": f'"{hashlib.sha256(content).hexdigest()}"',
            "Content-Type": "application/octet-stream",
        }
        if body:
            with self._guard:
                self.downloads[(repo, name)] += 1
        self.send(handler, 200, content if body else b"", headers, len(content))

    def split(self, path: str, marker: str) -> tuple[str | None, bool, str]:
        """(repository, whether `marker` follows it, what comes after) for a path naming a repository."""
        for repo in self.repositories:
            if path.startswith(f"/{repo}{marker}"):
                return repo, True, path.removeprefix(f"/{repo}{marker}")
            if path in (f"/{repo}", f"/{repo}/"):
                return repo, False, ""
        return None, False, ""

    def api(self, handler: http.server.BaseHTTPRequestHandler, rest: str) -> None:
        repo = next((r for r in self.repositories if rest == r or rest.startswith(f"{r}/")), None)
        if repo is None:
            self.send(handler, 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"})
            return
        tail = rest.removeprefix(repo).strip("/")
        root = self.repositories[repo]
        if tail.startswith("tree/"):
            folder = tail.removeprefix("tree/").partition("/")[2].strip("/")  # after the revision
            if folder and not (root / folder).is_dir():
                self.send(handler, 404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"})
                return
            entries = [
                {"type": "file", "path": f, "size": (root / f).stat().st_size, "oid": self.commits[repo]}
                for f in self.files(repo)
                if not folder or f.startswith(f"{folder}/")
            ]
            self.send(handler, 200, json.dumps(entries).encode(), {"Content-Type": "application/json"})
            return
        info = {
            "id": repo,
            "modelId": repo,
            "sha": self.commits[repo],
            "private": False,
            "disabled": False,
            "gated": False,
            "tags": [],
            "siblings": [{"rfilename": f} for f in self.files(repo)],
        }
        self.send(handler, 200, json.dumps(info).encode(), {"Content-Type": "application/json"})

    @staticmethod
    def send(
        handler: http.server.BaseHTTPRequestHandler,
        status: int,
        content: bytes,
        headers: dict[str, str],
        length: int | None = None,
    ) -> None:
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(content) if length is None else length))
        handler.end_headers()
        if content:
            handler.wfile.write(content)
