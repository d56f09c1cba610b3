"""Every `$ specinfer ...` transcript of README.md and docs/ shows what the installed CLI prints, on the files its
transcripts.yaml defines (hack/transcripts.py; `make docs` rewrites the outputs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hack.transcripts import (
    ROOT,
    Result,
    Transcript,
    all_transcripts,
    matches,
    materialize,
    run,
    run_all,
    shown_for,
    transcripts,
    undefined,
)

TRANSCRIPTS = all_transcripts()


@pytest.fixture(scope="module")
def printed(request: pytest.FixtureRequest) -> dict[Transcript, Result]:
    """The selected transcripts, run side by side (each one is a new process of the CLI)."""
    selected = [
        item.callspec.params["transcript"]
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.originalname == "test_the_page_shows_what_the_cli_prints"
    ]
    return run_all([t for t in selected if isinstance(t, Transcript) and undefined(t) is None])


def test_the_docs_have_transcripts_in_every_place_they_are_known_to_be() -> None:
    pages = {t.page.relative_to(ROOT).as_posix() for t in TRANSCRIPTS}
    assert {"docs/methods/README.md", "docs/methods/dflash.md", "docs/security.md"} <= pages


@pytest.mark.parametrize("transcript", TRANSCRIPTS, ids=lambda t: t.id)
def test_the_page_shows_what_the_cli_prints(transcript: Transcript, printed: dict[Transcript, Result]) -> None:
    assert undefined(transcript) is None, undefined(transcript)
    result = printed[transcript]
    assert matches(transcript.shown, result), (
        f"{transcript.id}: $ {transcript.command}\npage:\n"
        + "\n".join(transcript.shown)
        + f"\nprinted (exit {result.exit_code}):\n"
        + "\n".join(shown_for(result, transcript.shown))
        + "\n(`make docs` writes what is printed into the page)"
    )


def page(tmp_path: Path, text: str, definitions: str | None = None) -> Path:
    if definitions is not None:
        (tmp_path / "transcripts.yaml").write_text(definitions)
    (tmp_path / "page.md").write_text(text)
    return tmp_path / "page.md"


def test_a_transcript_runs_to_the_next_dollar_line_or_the_end_of_its_block(tmp_path: Path) -> None:
    text = (
        "intro\n```console\n$ specinfer validate a.yaml   # comment\nline 1\nline 2\n$ kubectl get pods\nNAME\n"
        "$ specinfer validate -q b.yaml\n(no output; exit 0)\n```\n```sh\n$ specinfer validate c.yaml\n```\n"
    )
    found = list(transcripts(page(tmp_path, text)))
    assert [(t.line, t.command, t.shown) for t in found] == [
        (3, "specinfer validate a.yaml   # comment", ("line 1", "line 2")),
        (8, "specinfer validate -q b.yaml", ("(no output; exit 0)",)),
    ]


def test_a_file_without_a_definition_fails_and_names_the_file(tmp_path: Path) -> None:
    text = "```console\n$ specinfer validate -q nowhere.yaml\n(no output; exit 0)\n```\n"
    (transcript,) = transcripts(page(tmp_path, text, "other.yaml: {from: examples/ngram.yaml}\n"))
    assert "no definition of nowhere.yaml" in (undefined(transcript) or "")
    with pytest.raises(LookupError, match=r"nowhere\.yaml"):
        run(transcript)


def test_a_definition_removes_then_sets_dotted_paths_of_its_example() -> None:
    made = yaml.safe_load(
        materialize(
            {
                "from": "examples/ngram.yaml",
                "remove": ["spec.graph.mode"],
                "set": {"spec.graph.captureSizes": [5, 5], "spec.parallelism.pipeline": 2},
            }
        )
    )
    assert made["spec"]["graph"] == {"captureSizes": [5, 5]}
    assert made["spec"]["parallelism"] == {"pipeline": 2}
    assert made["spec"]["speculative"]["method"] == "ngram"
    with pytest.raises(ValueError, match=r"no spec\.graph\.maxBatchSize"):
        materialize({"from": "examples/ngram.yaml", "remove": ["spec.graph.maxBatchSize"]})


@pytest.mark.parametrize(
    ("shown", "output", "exit_code", "expected"),
    [
        (("a: error",), ("a: error",), 1, True),
        (("a: error",), ("a: error", "a: another"), 1, False),
        (("(no output; exit 0)",), (), 0, True),
        (("(no output; exit 0)",), (), 1, False),
        (("a: not allowed (...)",), ("a: not allowed by the policy",), 1, True),
        (("a: not allowed (...)",), ("a: not allowed",), 1, False),
        (("a: not allowed (...)",), ("a: refused by the policy",), 1, False),
    ],
)
def test_the_page_conventions(shown: tuple[str, ...], output: tuple[str, ...], exit_code: int, expected: bool) -> None:
    assert matches(shown, Result(output, exit_code)) is expected


def test_rewriting_keeps_the_lines_the_page_shortens_while_they_still_match() -> None:
    result = Result(("a: not allowed by the policy", "1 checked"), 1)
    assert shown_for(result, ("a: not allowed (...)",)) == ("a: not allowed (...)", "1 checked")
    assert shown_for(result, ("a: refused (...)",)) == result.output
    assert shown_for(Result((), 2), ("anything",)) == ("(no output; exit 2)",)
