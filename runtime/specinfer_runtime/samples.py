"""Recording a share of the prompts an engine serves, for the drafts that learn from them (spec.learning).

The recorder is ASGI middleware inside vLLM's own API server (`vllm serve --middleware`), so serving gets no
extra hop, process or copy of the response: it sees a sampled request's body as the server reads it, and hands
it to a writer thread through a bounded queue. Nothing a request waits for touches the disk, parses JSON or
takes a lock the writer holds; when the queue is full the sample is dropped and counted, never waited for.

Only the prompt is kept (the recorded chat roles, or a completion prompt, masked: prompts.py) with the answer
length asked for: the training Job has the target write its own answer again, with the hidden states it
computes on the way (self-distillation), so the response stream is never read. Each engine mounts only its own
directory of the claim (`samples/<pod>/`, a subPathExpr of its name): it appends `<time>-<n>.jsonl` files there,
one JSON object a line, written as `.part` and renamed when complete, and never sees another pod's. Its
directory is capped in bytes and each file is removed at the retention age; the training Job's first step
prunes every pod's (training/retention.py).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import Counter

from specinfer_runtime.prompts import MAX_PATTERNS, Filter, pattern_problem, prompt_of
from specinfer_runtime.quantity import parse

# The environment the operator sets on the engine container when spec.learning is on.
DIR_ENV = "SPECINFER_SAMPLES_DIR"
PERCENT_ENV = "SPECINFER_SAMPLES_PERCENT"
MAX_BYTES_ENV = "SPECINFER_SAMPLES_MAX_BYTES"
RETENTION_ENV = "SPECINFER_SAMPLES_RETENTION_SECONDS"
POD_ENV = "SPECINFER_POD_NAME"
ROLES_ENV = "SPECINFER_SAMPLES_ROLES"  # comma-separated chat roles
REDACT_ENV = "SPECINFER_SAMPLES_REDACT"  # a JSON list of regular expressions
MIDDLEWARE = "specinfer_runtime.samples.SampleRecorder"
SAMPLES_PATH = "/var/lib/specinfer/samples"  # where the operator mounts the pod's own samples/<pod>/ in the engine

RECORDED_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
MAX_REQUEST_BYTES = 256 * 1024  # a larger body is not recorded (its prompt is longer than any head trains on)
QUEUE_SIZE = 64
FILE_RECORDS = 256  # a file is complete after this many samples, or ROTATE_SECONDS
ROTATE_SECONDS = 30.0
SCAN_SECONDS = 60.0  # how often the store's size is measured again and old files removed
MAX_FILES = 100_000  # files looked at in one scan: a store this size is full whatever its bytes

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger(__name__)
RECORDED = Counter("specinfer_samples_recorded", "Prompts recorded for drafts that learn from served traffic.")
RECORDED_BYTES = Counter("specinfer_samples_recorded_bytes", "Bytes of the prompts recorded.")
DROPPED = Counter(
    "specinfer_samples_dropped",
    "Sampled requests not recorded: full (the store's byte cap), busy (the writer's queue), too_large, unusable "
    "(not a chat or completion prompt).",
    ["reason"],
)


@dataclass(frozen=True)
class Settings:
    """What to record and where, as the operator's environment variables say."""

    directory: Path
    percent: int
    max_bytes: int
    retention_seconds: float
    pod: str
    keep: Filter = field(default_factory=Filter)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        size = parse(env.get(MAX_BYTES_ENV, "0")) or 0
        patterns = _patterns(env)
        if patterns is None:  # what must be masked cannot be: nothing is recorded (serving goes on)
            log.warning("%s is not a list of patterns this recorder can apply: recording nothing", REDACT_ENV)
        return cls(
            directory=Path(env[DIR_ENV]),
            percent=0 if patterns is None else max(0, min(100, int(env.get(PERCENT_ENV, "0")))),
            max_bytes=int(size),
            retention_seconds=float(env.get(RETENTION_ENV, "604800")),
            pod=Path(env.get(POD_ENV, "") or "engine").name,
            keep=Filter(frozenset(r for r in env.get(ROLES_ENV, "user").split(",") if r), patterns or ()),
        )


def _patterns(env: Mapping[str, str]) -> list[str] | None:
    """The redaction patterns; None unless every one can be applied (the operator writes a list it checked)."""
    try:
        found = json.loads(env.get(REDACT_ENV, "[]"))
    except ValueError:
        return None
    if not isinstance(found, list) or len(found) > MAX_PATTERNS:
        return None
    good = all(isinstance(p, str) and pattern_problem(p) is None for p in found)
    return found if good else None


def middleware_flags(env: Mapping[str, str]) -> list[str]:
    """The `vllm serve` flags that install the recorder, when the operator asked for it."""
    return ["--middleware", MIDDLEWARE] if env.get(DIR_ENV, "").strip() else []


class Share:
    """Takes exactly `percent` of requests, spread evenly and the same way on every run (tests repeat)."""

    def __init__(self, percent: int) -> None:
        self.percent = percent
        self.seen = 0

    def take(self) -> bool:
        before, self.seen = self.seen, self.seen + 1
        return (self.seen * self.percent) // 100 > (before * self.percent) // 100


def own_files(directory: Path) -> Iterator[os.DirEntry[str]]:
    """Sample files of one pod's directory, complete (.jsonl) or being written (.part), at most MAX_FILES."""
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for seen, entry in enumerate(e for e in entries if _sample_file(e)):
            if seen >= MAX_FILES:
                return
            yield entry


def _sample_file(entry: os.DirEntry[str]) -> bool:
    return entry.name.endswith((".jsonl", ".part")) and entry.is_file(follow_symlinks=False)


def files(directory: Path) -> Iterator[os.DirEntry[str]]:
    """Sample files of every pod's directory under `directory` (the claim's samples/), at most MAX_FILES."""
    seen = 0
    with contextlib.suppress(OSError), os.scandir(directory) as pods:
        for pod in pods:
            if not pod.is_dir(follow_symlinks=False):
                continue
            for entry in own_files(Path(pod.path)):
                yield entry
                seen += 1
                if seen >= MAX_FILES:
                    return


def prune(directory: Path, retention_seconds: float, now: float) -> int:
    """Remove this pod's files past the retention age (a .part left by a pod that died writing goes too); the
    bytes of those left."""
    kept = 0
    for entry in own_files(directory):
        with contextlib.suppress(OSError):
            stat = entry.stat(follow_symlinks=False)
            if now - stat.st_mtime > retention_seconds:
                os.unlink(entry.path)
            else:
                kept += stat.st_size
    return kept


class Store:
    """The writer thread's side: appends samples to this pod's current file, rotates it, keeps the cap."""

    def __init__(self, settings: Settings, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock
        self.own = settings.directory
        self.part: Path | None = None
        self.records = 0
        self.opened = 0.0
        self.used = 0
        self.scanned = float("-inf")

    def write(self, sample: dict[str, Any]) -> None:
        now = self.clock()
        self.maintain(now)
        line = (json.dumps(sample, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        if self.used + len(line) > self.settings.max_bytes:
            DROPPED.labels("full").inc()
            return
        if self.part is None:
            self.own.mkdir(parents=True, exist_ok=True)
            self.part = self.own / f"{int(now * 1000)}-{os.getpid()}.part"
            self.records, self.opened = 0, now
        with self.part.open("ab") as out:
            out.write(line)
        self.records += 1
        self.used += len(line)
        RECORDED.inc()
        RECORDED_BYTES.inc(len(line))
        if self.records >= FILE_RECORDS:
            self.complete()

    def maintain(self, now: float) -> None:
        """Rotate an old file; measure the directory again and prune it every SCAN_SECONDS."""
        if self.part is not None and now - self.opened >= ROTATE_SECONDS:
            self.complete()
        if now - self.scanned >= SCAN_SECONDS:
            self.scanned = now
            self.used = prune(self.settings.directory, self.settings.retention_seconds, now)

    def complete(self) -> None:
        if self.part is not None:
            with contextlib.suppress(OSError):
                self.part.rename(self.part.with_suffix(".jsonl"))
            self.part = None


class Writer:
    """A daemon thread draining a bounded queue into the store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.queue: queue.Queue[tuple[str, bytes] | None] = queue.Queue(QUEUE_SIZE)
        self.thread = threading.Thread(target=self.run, name="specinfer-samples", daemon=True)
        self.thread.start()
        atexit.register(self.close)  # vLLM's server exits on SIGTERM: the last file is completed, not left .part

    def offer(self, kind: str, body: bytes) -> None:
        try:
            self.queue.put_nowait((kind, body))
        except queue.Full:
            DROPPED.labels("busy").inc()

    def run(self) -> None:
        while True:
            try:
                item = self.queue.get(timeout=ROTATE_SECONDS)
            except queue.Empty:
                self.store.maintain(self.store.clock())
                continue
            if item is None:
                self.store.complete()
                return
            kind, body = item
            sample = prompt_of(kind, body, self.store.settings.keep)
            if sample is None:
                DROPPED.labels("unusable").inc()
                continue
            try:
                self.store.write({"kind": kind, "time": round(self.store.clock()), **sample})
            except OSError:
                DROPPED.labels("full").inc()  # the volume refused the write: it is full, or gone

    def close(self) -> None:
        if self.thread.is_alive():
            self.queue.put(None)
            self.thread.join(timeout=ROTATE_SECONDS)


class SampleRecorder:
    """ASGI middleware: records the bodies of a share of chat and completion requests, passing every message
    through unchanged."""

    def __init__(self, app: App, settings: Settings | None = None) -> None:
        self.app = app
        self.settings = settings or Settings.from_env(os.environ)
        self.share = Share(self.settings.percent)
        self.writer = Writer(Store(self.settings))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = RECORDED_PATHS.get(scope.get("path", "")) if scope.get("type") == "http" else None
        if kind is None or scope.get("method") != "POST" or not self.share.take():
            await self.app(scope, receive, send)
            return
        body: list[bytes] = []
        size = 0
        done = False

        async def tee() -> Message:
            nonlocal size, done
            message = await receive()
            if done or message.get("type") != "http.request":
                return message
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_REQUEST_BYTES:
                done = True
                body.clear()
                DROPPED.labels("too_large").inc()
            else:
                body.append(chunk)
                if not message.get("more_body", False):
                    done = True
                    self.writer.offer(kind, b"".join(body))
            return message

        await self.app(scope, tee, send)
