"""The runtime downloads a private draft with the draft's own token, through the real Hub client.

A small stand-in for the Hugging Face Hub's HTTP API (the endpoints `snapshot_download` calls) serves
one private repository and records the token of every request; the engine venv's huggingface_hub
talks to it through HF_ENDPOINT.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from hack.engine import engine_python
from specinfer_runtime.engine import EngineSpec

REPOSITORY = "org/private-draft"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
FILES = {"config.json": b'{"model_type": "llama", "vocab_size": 512}', "tokenizer.json": b'{"version": "1.0"}'}
DRAFT_TOKEN = "hf_draft_only"

SPEC = {
    "model": {"name": "org/target", "source": {"huggingFace": {"tokenSecretRef": {"name": "target-token"}}}},
    "speculative": {
        "method": "draft_model",
        "numSpeculativeTokens": 3,
        "draftModel": {
            "name": REPOSITORY,
            "source": {"huggingFace": {"tokenSecretRef": {"name": "draft-token"}, "revision": "main"}},
        },
    },
}
FETCH = """
import json, os, sys
from specinfer_runtime.engine import EngineSpec
from specinfer_runtime.fetch import fetch_draft
print(json.dumps(fetch_draft(EngineSpec.model_validate(json.loads(sys.argv[1])), os.environ, sys.argv[2])))
"""


class FakeHub(BaseHTTPRequestHandler):
    requests: ClassVar[list[tuple[str, str]]] = []  # (Authorization, path)

    def log_message(self, *args: Any) -> None:
        pass

    def _reply(self, status: int, body: bytes, headers: dict[str, str] | None = None, send: bool = True) -> None:
        self.send_response(status)
        for key, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if send:
            self.wfile.write(body)

    def _serve(self, send: bool) -> None:
        FakeHub.requests.append((self.headers.get("Authorization", ""), self.path))
        if self.headers.get("Authorization") != f"Bearer {DRAFT_TOKEN}":
            self._reply(401, b'{"error": "Invalid credentials"}', {"X-Error-Code": "RepoNotFound"}, send)
            return
        path = self.path.split("?")[0]
        if path in (f"/api/models/{REPOSITORY}/revision/main", f"/api/models/{REPOSITORY}"):
            info = {"id": REPOSITORY, "sha": COMMIT, "siblings": [{"rfilename": f} for f in FILES]}
            self._reply(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, send)
        elif path == f"/api/models/{REPOSITORY}/tree/{COMMIT}":
            tree = [
                {"type": "file", "path": f, "size": len(b), "oid": hashlib.sha1(b).hexdigest()}
                for f, b in FILES.items()
            ]
            self._reply(200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, send)
        elif path.startswith(f"/{REPOSITORY}/resolve/{COMMIT}/") and path.rsplit("/", 1)[1] in FILES:
            body = FILES[path.rsplit("/", 1)[1]]
            etag = f'"{hashlib.sha1(body).hexdigest()}"'
            self._reply(200, body, {"ETag": etag, "X-Repo-Commit": COMMIT}, send)
        else:
            self._reply(404, b"{}", {"X-Error-Code": "EntryNotFound"}, send)

    def do_GET(self) -> None:
        self._serve(send=True)

    def do_HEAD(self) -> None:
        self._serve(send=False)


@pytest.fixture
def hub() -> Iterator[str]:
    FakeHub.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def fetch(engine_venv: Path, hub: str, root: Path, token: str) -> str | None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "VIRTUAL_ENV"))}
    env.update(
        HF_ENDPOINT=hub,
        HF_HOME=str(root / "hf-home"),
        HF_HUB_DISABLE_XET="1",
        HF_TOKEN="hf_target_only",  # vLLM's token: the runtime must not use it for the draft
        SPECINFER_DRAFT_HF_TOKEN=token,
    )
    printed = engine_python(engine_venv, "-c", FETCH, json.dumps(SPEC), str(root), env=env, timeout=120)
    reason: str | None = json.loads(printed.strip().splitlines()[-1])
    return reason


def test_the_draft_comes_down_with_its_own_token(engine_venv: Path, hub: str, tmp_path: Path) -> None:
    assert fetch(engine_venv, hub, tmp_path, DRAFT_TOKEN) is None
    for name, body in FILES.items():
        assert (tmp_path / "draft" / name).read_bytes() == body
    to_the_repository = {auth for auth, path in FakeHub.requests if REPOSITORY in path}
    assert to_the_repository == {f"Bearer {DRAFT_TOKEN}"}
    assert not any("hf_target_only" in auth for auth, _ in FakeHub.requests)


def test_a_refused_token_is_one_line(engine_venv: Path, hub: str, tmp_path: Path) -> None:
    reason = fetch(engine_venv, hub, tmp_path, "hf_wrong")
    assert reason is not None
    assert reason.startswith(f"cannot download the draft model {REPOSITORY} with its own token: ")
    assert "\n" not in reason
    assert not (tmp_path / "draft" / "config.json").exists()


HOSTILE = f"{DRAFT_TOKEN}_secret\nX-Injected: 1"
LIBRARY = """
import json, sys
from huggingface_hub import snapshot_download
from specinfer_runtime.redaction import redact
try:
    snapshot_download(repo_id=sys.argv[1], token=sys.argv[2], local_dir=sys.argv[3])
except Exception as error:
    print(json.dumps({"said": str(error), "scrubbed": redact(str(error), [sys.argv[2]])}))
"""


def test_a_token_that_breaks_the_http_library_is_never_quoted(engine_venv: Path, hub: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "VIRTUAL_ENV"))}
    env.update(HF_ENDPOINT=hub, HF_HOME=str(tmp_path / "hf-home"), HF_HUB_DISABLE_XET="1")
    # The Hub client quotes the header it refuses, token and all: what the runtime must never pass on.
    printed = engine_python(engine_venv, "-c", LIBRARY, REPOSITORY, HOSTILE, str(tmp_path / "x"), env=env)
    found = json.loads(printed.strip().splitlines()[-1])
    assert f"{DRAFT_TOKEN}_secret" in found["said"]
    assert "_secret" not in found["scrubbed"]
    # The runtime refuses such a token before the library sees it: the termination message, its log and
    # its output hold no part of it.
    config = tmp_path / "engine.json"
    config.write_text(json.dumps(EngineSpec.model_validate(SPEC).dump()))
    log = tmp_path / "termination-log"
    main = "import sys; from specinfer_runtime.launcher import main; main(sys.argv[1:])"
    launcher = [str(engine_venv / "bin" / "python"), "-c", main, "--config", str(config), "--termination-log", str(log)]
    for target_token, refused in (
        (f"hf_target_only\n{DRAFT_TOKEN}", "HF_TOKEN"),
        ("hf_target_only", "SPECINFER_DRAFT"),
    ):
        env.update(SPECINFER_DRAFT_HF_TOKEN=HOSTILE, HF_TOKEN=target_token)
        result = subprocess.run(launcher, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 1
        reason = log.read_text()
        assert reason.startswith(refused), reason
        assert "holds a control character" in reason
        for text in (reason, result.stdout, result.stderr):
            assert "_secret" not in text
            assert "target_only" not in text
            assert DRAFT_TOKEN not in text
