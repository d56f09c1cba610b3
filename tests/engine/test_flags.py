"""The owned-flag table against the installed vLLM's own parser: current, and no spelling gets past the rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hack.engine import REPO, engine_python
from hack.vllm_flags import OWNED
from specinfer_runtime import flags
from specinfer_runtime.celrules import evaluate

TABLE = REPO / "runtime" / "specinfer_runtime" / "vllm_serve_flags.json"


def vllm_flags(engine_venv: Path, tmp_path: Path, command: str, stdin: str = "") -> Any:
    output = tmp_path / f"{command}.json"
    engine_python(engine_venv, "-m", "hack.vllm_flags", command, str(output), stdin=stdin)
    return json.loads(output.read_text())


def refused(argument: str) -> bool:
    verdict: bool = evaluate(flags.SHADOWS_OWNED, argument)
    return verdict


def spellings(option: str) -> set[str]:
    """What a user could write that vLLM might read as `option`."""
    found = {option, f"{option}=1", f"{option}.key", f"{option}.key=1", f"{option}+"}
    if option.startswith("--"):
        body = option[2:]
        found |= {f"--{body[:i]}" for i in range(1, len(body))}  # abbreviations, ambiguous ones included
        found |= {f"--{body.replace('-', '_')}", f"--{body.replace('-', '_')}=1", f"--{body.replace('-', '_')}.key"}
    else:
        found |= {option[:i] for i in range(2, len(option))}  # -t for -tp
        found |= {f"{option}1", f"{option}x", f"{option}=x"}  # the value attached
    return found


def test_the_committed_table_is_what_the_installed_vllm_defines(engine_venv: Path, tmp_path: Path) -> None:
    """Fails when vLLM grows a flag or alias for an owned setting, or the table was edited by hand."""
    current = vllm_flags(engine_venv, tmp_path, "table")
    committed = json.loads(TABLE.read_text())
    assert committed == current, "runtime/specinfer_runtime/vllm_serve_flags.json is stale: run make vllm-flags"


def test_no_spelling_that_vllm_reads_as_an_owned_flag_gets_past_the_rule(
    engine_venv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    candidates = sorted({s for option in flags.OWNED for s in spellings(option)})
    # With and without a value after it: a flag taking none would otherwise fail on the stray value.
    lists = [[c] for c in candidates] + [[c, "1"] for c in candidates]
    results = vllm_flags(engine_venv, tmp_path, "parse", json.dumps(lists))
    owned_by: dict[str, set[str]] = {c: set() for c in candidates}
    accepted_by_vllm: dict[str, bool] = dict.fromkeys(candidates, False)
    for result in results:
        candidate = result["arguments"][0]
        owned_by[candidate] |= set(result["reached"]) & set(OWNED)
        accepted_by_vllm[candidate] |= not result["error"]
    shadowing = [c for c in candidates if owned_by[c]]
    passed = [c for c in shadowing if not refused(c)]
    assert not passed, f"vLLM reads these as owned flags, the rule lets them through: {passed}"
    # The rule is no stricter than it needs to be: what it refuses sets an owned flag or stops vLLM.
    needless = [c for c in candidates if refused(c) and not owned_by[c] and accepted_by_vllm[c]]
    assert not needless, f"refused, although vLLM reads them as no owned flag and starts: {needless}"
    with capsys.disabled():
        print(
            f"\nflags: {len(candidates)} spellings of {len(flags.OWNED)} owned options through vLLM "
            f"{flags.VLLM_VERSION}'s parser: {len(shadowing)} set an owned setting, all refused; "
            f"{sum(map(refused, candidates)) - len(shadowing)} more refused, on which vLLM stops"
        )


def test_every_other_vllm_option_passes(engine_venv: Path, tmp_path: Path) -> None:
    others = [o for o in flags.OPTIONS if o not in flags.OWNED]
    results = vllm_flags(engine_venv, tmp_path, "parse", json.dumps([[o] for o in others] + [[o, "1"] for o in others]))
    reaching_owned = {r["arguments"][0] for r in results if set(r["reached"]) & set(OWNED)}
    assert not reaching_owned, f"vLLM options outside the table that set owned settings: {sorted(reaching_owned)}"
    assert [o for o in others if refused(o)] == []
