"""The served-prompt recorder: it passes every ASGI message through unchanged, records exactly its share of chat
and completion prompts, keeps only the prompt of what a client sends, and holds the store to its byte cap and
retention age (the clock is given, so no test waits on it)."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from specinfer_runtime import samples
from specinfer_runtime.celrules import evaluate
from specinfer_runtime.prompts import MASK, Filter, pattern_problem, prompt_of
from specinfer_runtime.samples import (
    MAX_REQUEST_BYTES,
    SampleRecorder,
    Settings,
    Share,
    Store,
    Writer,
    middleware_flags,
    prune,
)
from tests.support import ROOT

KEEP = Filter()  # the default: the users' turns, nothing masked

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "stream": True}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def settings(tmp_path: Path, percent: int = 100, max_bytes: int = 1 << 20) -> Settings:
    """An engine's settings: its directory is its own, samples/engine-0 of the claim (tmp_path is samples/)."""
    return Settings(
        directory=tmp_path / "engine-0", percent=percent, max_bytes=max_bytes, retention_seconds=3600, pod="engine-0"
    )


def dropped(reason: str) -> float:
    return REGISTRY.get_sample_value("specinfer_samples_dropped_total", {"reason": reason}) or 0.0


def recorded(tmp_path: Path) -> list[dict[str, Any]]:
    lines = []
    for path in sorted(tmp_path.glob("*/*")):
        lines += [json.loads(line) for line in path.read_text().splitlines()]
    return lines


class Engine:
    """An ASGI app that reads the whole body, as vLLM's server does, and answers with it."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def call(app: Any, path: str, body: bytes, chunk: int = 7, method: str = "POST") -> list[dict[str, Any]]:
    """One request through `app`, its body in chunks; the messages the client got."""
    parts = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
    incoming = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1} for i, p in enumerate(parts)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app({"type": "http", "method": method, "path": path}, receive, send))
    return sent


def test_the_share_is_exact_and_even() -> None:
    for percent in (0, 1, 5, 33, 50, 100):
        share = Share(percent)
        taken = [share.take() for _ in range(1000)]
        assert sum(taken) == percent * 10
    share = Share(25)
    assert [share.take() for _ in range(8)] == [False, False, False, True] * 2


def test_the_recorder_passes_the_request_through_and_records_the_prompt_only(tmp_path: Path) -> None:
    engine = Engine()
    recorder = SampleRecorder(engine, settings(tmp_path))
    body = json.dumps(CHAT).encode()
    sent = call(recorder, "/v1/chat/completions", body)
    call(recorder, "/v1/completions", json.dumps({"model": "tiny", "prompt": "once upon"}).encode(), chunk=1000)
    call(recorder, "/v1/models", b"", method="GET")
    recorder.writer.close()
    assert engine.bodies[0] == body
    assert sent[1]["body"] == body
    found = recorded(tmp_path)
    assert [{k: v for k, v in r.items() if k != "time"} for r in found] == [
        {"kind": "chat", "messages": [{"role": "user", "content": "hello"}], "maxTokens": 8},
        {"kind": "completion", "prompt": "once upon"},
    ]
    assert all(p.suffix == ".jsonl" for p in tmp_path.glob("*/*"))  # completed when the writer stops


def test_a_body_over_the_limit_is_passed_on_whole_and_not_recorded(tmp_path: Path) -> None:
    engine = Engine()
    recorder = SampleRecorder(engine, settings(tmp_path))
    before = dropped("too_large")
    huge = json.dumps({"prompt": "x" * MAX_REQUEST_BYTES}).encode()
    call(recorder, "/v1/completions", huge, chunk=4096)
    recorder.writer.close()
    assert engine.bodies == [huge]
    assert recorded(tmp_path) == []
    assert dropped("too_large") == before + 1


@pytest.mark.parametrize(
    ("kind", "body"),
    [
        ("chat", b"\xff\xfe binary"),
        ("chat", b"[" * 100_000 + b"]" * 100_000),
        ("chat", b'"a string"'),
        ("chat", b'{"messages": []}'),
        ("chat", b'{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}'),
        ("chat", b'{"messages": [{"role": 1, "content": "x"}]}'),
        ("completion", b'{"prompt": [1, true]}'),
        ("completion", b'{"prompt": {"a": 1}}'),
        ("completion", b'{"prompt": ""}'),
    ],
)
def test_what_is_not_a_prompt_is_refused(kind: str, body: bytes) -> None:
    assert prompt_of(kind, body, KEEP) is None


def test_prompts_as_clients_write_them() -> None:
    parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}
    assert prompt_of("chat", json.dumps(parts).encode(), KEEP) == {"messages": [{"role": "user", "content": "ab"}]}
    assert prompt_of("completion", b'{"prompt": [5, 6, 7]}', KEEP) == {"promptTokenIds": [5, 6, 7]}
    asked = b'{"prompt": "p", "max_tokens": 1, "max_completion_tokens": 9}'
    assert prompt_of("completion", asked, KEEP) == {"prompt": "p", "maxTokens": 9}
    assert prompt_of("completion", b'{"prompt": "p", "max_tokens": true}', KEEP) == {"prompt": "p"}


CONVERSATION = {
    "messages": [
        {"role": "system", "content": "You are the bank's assistant. Internal: escalate to desk 42."},
        {"role": "user", "content": "what is my balance?"},
        {"role": "assistant", "content": "Your balance is 1,204.00 on account 7731."},
        {"role": "user", "content": "thanks"},
    ]
}


def test_only_the_users_turns_are_recorded_unless_more_roles_are_asked_for() -> None:
    body = json.dumps(CONVERSATION).encode()
    found = prompt_of("chat", body, KEEP)
    assert found == {
        "messages": [{"role": "user", "content": "what is my balance?"}, {"role": "user", "content": "thanks"}]
    }
    assert "1,204.00" not in json.dumps(found)
    assert "desk 42" not in json.dumps(found)
    everything = Filter(frozenset({"system", "user", "assistant"}))
    assert prompt_of("chat", body, everything) == CONVERSATION
    only_system = json.dumps({"messages": [CONVERSATION["messages"][0]]}).encode()
    assert prompt_of("chat", only_system, KEEP) is None  # nothing of the recorded roles: nothing recorded
    assert prompt_of("completion", b'{"prompt": "p"}', Filter(frozenset({"system"}))) is None  # a user's text


def test_what_the_redaction_patterns_match_never_reaches_the_claim(tmp_path: Path) -> None:
    leaked = "connect with postgres://app:s3cret-pa55@db.internal:5432/orders and key sk-live0123456789abcdef"
    keep = Filter(patterns=[r"postgres://\S+", r"sk-[A-Za-z0-9]{8,}"])
    chat = json.dumps({"messages": [{"role": "user", "content": leaked}]}).encode()
    said = f"connect with {MASK} and key {MASK}"
    assert prompt_of("chat", chat, keep) == {"messages": [{"role": "user", "content": said}]}
    assert prompt_of("completion", json.dumps({"prompt": leaked}).encode(), keep) == {"prompt": said}
    # Token ids cannot be scanned: with patterns, such a prompt is not recorded at all.
    assert prompt_of("completion", b'{"prompt": [5, 6, 7]}', keep) is None
    engine = Engine()
    recorder = SampleRecorder(engine, replace(settings(tmp_path), keep=keep))
    call(recorder, "/v1/chat/completions", chat)
    recorder.writer.close()
    assert engine.bodies == [chat]  # the engine still gets the request as sent
    stored = "".join(p.read_text() for p in tmp_path.glob("*/*"))
    assert "s3cret" not in stored
    assert "sk-live" not in stored
    assert MASK in stored


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("(?=secret)\\w+", "RE2 does not support"),
        ("(?<!x)y", "RE2 does not support"),
        ("(a)\\1", "RE2 does not support"),
        ("(unclosed", "not a regular expression"),
        ("(a+)+$", "backtrack without bound"),
        ("(\\w+\\s?)*@", "backtrack without bound"),
        ("a" * 257, "more than 256"),
    ],
)
def test_redaction_patterns_are_regular_expressions_re2_also_reads(pattern: str, words: str) -> None:
    assert words in (pattern_problem(pattern) or "")


def test_the_patterns_and_roles_come_from_the_operator() -> None:
    env = {
        samples.DIR_ENV: "/s",
        samples.POD_ENV: "p-1",
        samples.ROLES_ENV: "user,system",
        samples.REDACT_ENV: json.dumps([r"sk-[a-z]+"]),
    }
    parsed = Settings.from_env(env)
    assert parsed.keep.roles == {"user", "system"}
    assert parsed.keep.masked("key sk-abc") == f"key {MASK}"
    assert Settings.from_env({samples.DIR_ENV: "/s"}).keep.roles == {"user"}
    assert parsed.percent == 0  # PERCENT_ENV unset
    env[samples.PERCENT_ENV] = "5"
    assert Settings.from_env(env).percent == 5
    # What must be masked and cannot be: nothing is recorded at all, rather than unmasked prompts.
    for unusable in ('{"a": 1}', "not json", json.dumps(["(?=a)b"]), json.dumps(["sk"] * 17), json.dumps([1])):
        refused = Settings.from_env({**env, samples.REDACT_ENV: unusable})
        assert refused.percent == 0, unusable


def test_the_store_keeps_its_byte_cap_and_rotates_its_files(tmp_path: Path) -> None:
    clock = Clock()
    store = Store(settings(tmp_path, max_bytes=300), clock)
    before = dropped("full")
    line = len(json.dumps({"kind": "completion", "prompt": "prompt 0 " + "y" * 40}, separators=(",", ":"))) + 1
    for i in range(10):
        store.write({"kind": "completion", "prompt": f"prompt {i} " + "y" * 40})
    assert dropped("full") - before == 10 - 300 // line
    assert list(tmp_path.glob("*/*.part"))  # the current file is not complete yet
    clock.now += samples.ROTATE_SECONDS
    store.maintain(clock.now)
    assert [p.suffix for p in tmp_path.glob("*/*")] == [".jsonl"]
    assert sum(p.stat().st_size for p in tmp_path.glob("*/*")) <= 300


def test_an_engine_removes_its_own_files_past_the_retention_age_and_no_one_elses(tmp_path: Path) -> None:
    now = 1_000_000.0
    for pod in ("a", "b"):
        (tmp_path / pod).mkdir()
        for name, age in (("1-1.jsonl", 10.0), ("0-1.part", 7200.0)):
            path = tmp_path / pod / name
            path.write_text('{"kind":"completion","prompt":"p"}\n')
            os.utime(path, (now - age, now - age))
    kept = prune(tmp_path / "a", 3600, now)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.glob("*/*")) == [
        "a/1-1.jsonl",
        "b/0-1.part",  # another pod's: the training Job's first step removes it
        "b/1-1.jsonl",
    ]
    assert kept == (tmp_path / "a" / "1-1.jsonl").stat().st_size


def test_an_engine_writes_into_its_own_directory_only(tmp_path: Path) -> None:
    (tmp_path / "other-pod").mkdir()
    (tmp_path / "other-pod" / "1-1.jsonl").write_text("x" * 1000 + "\n")
    store = Store(settings(tmp_path, max_bytes=200), Clock())
    store.write({"kind": "completion", "prompt": "mine"})
    store.complete()
    assert [p.parent.name for p in tmp_path.glob("*/*.jsonl") if "mine" in p.read_text()] == ["engine-0"]
    assert store.used < 200  # another pod's bytes are not this pod's: it could not even list them


def test_a_busy_writer_drops_instead_of_making_the_request_wait(tmp_path: Path) -> None:
    release = threading.Event()

    class Slow(Store):
        def write(self, sample: dict[str, Any]) -> None:
            release.wait()

    writer = Writer(Slow(settings(tmp_path)))
    before = dropped("busy")
    for _ in range(samples.QUEUE_SIZE + 10):
        writer.offer("completion", b'{"prompt": "p"}')
    assert dropped("busy") - before >= 10
    release.set()
    writer.close()


def test_the_recorder_is_installed_only_when_the_operator_asks() -> None:
    assert middleware_flags({}) == []
    assert middleware_flags({samples.DIR_ENV: "/var/lib/specinfer/learning/samples"}) == [
        "--middleware",
        "specinfer_runtime.samples.SampleRecorder",
    ]
    parsed = Settings.from_env(
        {samples.DIR_ENV: "/s", samples.PERCENT_ENV: "5", samples.MAX_BYTES_ENV: "1Gi", samples.POD_ENV: "p-1"}
    )
    assert (parsed.percent, parsed.max_bytes, parsed.pod) == (5, 1 << 30, "p-1")


@functools.cache
def redact_rule() -> str:
    """The CRD's rule on each sampling.redact item."""
    documents = yaml.safe_load_all((ROOT / "crds" / "speculativeinference.yaml").read_text())
    crd = next(d for d in documents if d and d["spec"]["names"]["kind"] == "SpeculativeInference")
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    item = spec["properties"]["learning"]["properties"]["sampling"]["properties"]["redact"]["items"]
    (rule,) = item["x-kubernetes-validations"]
    return str(rule["rule"])


@pytest.mark.parametrize(
    "pattern", ["(?=secret)\\w+", "(?<!x)y", "(a)\\1", "(?P<n>a)(?P=n)", "a++", "(a+)+$", "(ab){2}", "sk-[a-z]+"]
)
def test_kubectl_apply_refuses_what_the_operator_refuses(pattern: str) -> None:
    """The CRD's rule on each redaction pattern, evaluated as CEL, agrees with the operator's check."""
    assert (evaluate(redact_rule(), pattern) is False) == (pattern_problem(pattern) is not None)
