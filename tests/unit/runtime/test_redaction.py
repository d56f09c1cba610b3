"""Hub tokens never reach a termination message, a log line, the status or an event."""

from __future__ import annotations

from pathlib import Path

import pytest

from specinfer_operator.controller.health import pod_problem
from specinfer_runtime.fetch import fetch_draft
from specinfer_runtime.redaction import MASK, redact, token_problem
from tests.support.builders import engine, engine_pod

TOKEN = "hf_QuiteSecretValue0123"
DRAFT = {
    "model": {"name": "org/target"},
    "speculative": {
        "method": "draft_model",
        "numSpeculativeTokens": 3,
        "draftModel": {"name": "org/draft", "source": {"huggingFace": {"tokenSecretRef": {"name": "draft-token"}}}},
    },
}


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (f"{TOKEN}\n", None),  # `echo` into a Secret: stripped, not refused
        (f"{TOKEN}\nEvil: 1", "a control character at position 24 of 31"),
        ("hf_sécret", "a character outside ASCII at position 5 of 9"),
        (f"hf_a\x00{TOKEN}", "a control character at position 5"),
        ("  ", "is empty"),
    ],
)
def test_a_token_no_header_can_carry_is_refused_without_being_quoted(value: str, said: str | None) -> None:
    problem = token_problem("HF_TOKEN", value)
    if said is None:
        assert problem is None
        return
    assert problem is not None
    assert said in problem
    assert TOKEN not in problem
    assert "QuiteSecret" not in problem
    assert "sécret" not in problem


def test_a_library_message_quoting_the_token_is_scrubbed_in_every_form() -> None:
    hostile = f"{TOKEN}\nEvil: 1"
    messages = [
        f"Illegal header value b'Bearer {hostile!r}'",  # httpx, as the engine venv's huggingface_hub raises it
        "Illegal header value " + repr(("Bearer " + hostile).encode()),
        f"Invalid leading whitespace, reserved character(s), or return character(s) in header value: {hostile}",
    ]
    for message in messages:
        scrubbed = redact(message, [hostile])
        assert "QuiteSecret" not in scrubbed
        assert MASK in scrubbed


def test_the_operator_scrubs_what_looks_like_a_token_from_what_pods_report() -> None:
    said = f"401 with Authorization: Bearer {TOKEN} (token={TOKEN})"
    pod = engine_pod("demo-0", waiting="CrashLoopBackOff", message=said)
    found = pod_problem([pod], None)
    assert found is not None
    assert TOKEN not in found[1]
    assert "QuiteSecret" not in found[1]
    assert found[1].startswith("pod demo-0 restarted 4 times; last exit: 401 with Authorization: ***")


class Refusing:
    """The Hub client refusing the header, and quoting it, as httpx does."""

    def __call__(self, **kwargs: object) -> None:
        raise ValueError(f"Illegal header value b'Bearer {kwargs['token']}'")


def test_a_draft_download_that_fails_never_quotes_its_token(tmp_path: Path) -> None:
    hostile = fetch_draft(engine(DRAFT), {"SPECINFER_DRAFT_HF_TOKEN": f"{TOKEN}\nX: y"}, str(tmp_path), Refusing())
    assert hostile is not None
    assert "control character" in hostile
    assert "QuiteSecret" not in hostile
    refused = fetch_draft(engine(DRAFT), {"SPECINFER_DRAFT_HF_TOKEN": TOKEN}, str(tmp_path), Refusing())
    assert refused is not None
    assert refused.startswith("cannot download the draft model org/draft with its own token: ValueError")
    assert "QuiteSecret" not in refused


LOG_TAIL = "Python path configuration:\n  PYTHONHOME = 'value-of-a-secret'\nFatal Python error: init_fs_encoding"


def test_a_log_tail_never_reaches_the_status() -> None:
    """With FallbackToLogsOnError (a pod rendered by an earlier release), the kubelet makes the last log
    lines the message: a process that cannot start prints its environment."""
    found = pod_problem(
        [engine_pod("demo-0", waiting="CrashLoopBackOff", message=LOG_TAIL, policy="FallbackToLogsOnError")], None
    )
    assert found == ("CrashLoopBackOff", "pod demo-0 restarted 4 times; last exit: exit code 1")


def test_a_sidecars_words_never_reach_the_status() -> None:
    found = pod_problem([engine_pod("demo-0", waiting="CrashLoopBackOff", message=LOG_TAIL, container="proxy")], None)
    assert found == ("CrashLoopBackOff", "pod demo-0 restarted 4 times; last exit of container proxy: exit code 1")


def test_the_engines_own_message_is_one_bounded_line() -> None:
    said = "preflight:\n" + "x" * 5000
    found = pod_problem([engine_pod("demo-0", waiting="CrashLoopBackOff", message=said)], None)
    assert found is not None
    assert "\n" not in found[1]
    assert found[1].endswith("x...")
    assert len(found[1]) < 1100


@pytest.mark.parametrize(
    ("said", "shown"),
    [
        ("psql: postgres://user:password@db.internal/app failed", "psql: postgres://***@db.internal/app failed"),
        ("x https://a:p@ss@h.io:5432/x?y=1", "x https://***@h.io:5432/x?y=1"),
        ("redis://:secret@cache:6379/0", "redis://***@cache:6379/0"),
        ("see http://example.com/a@b and mailto:x@y", "see http://example.com/a@b and mailto:x@y"),
    ],
)
def test_a_urls_user_and_password_are_masked(said: str, shown: str) -> None:
    assert redact(said) == shown


def test_an_engines_message_with_a_url_credential_is_scrubbed() -> None:
    pod = engine_pod("demo-0", waiting="CrashLoopBackOff", message="cannot reach postgres://app:hunter22@db/x")
    found = pod_problem([pod], None)
    assert found is not None
    assert "hunter22" not in found[1]
    assert found[1].endswith("last exit: cannot reach postgres://***@db/x")
