"""The exact `vllm serve` argv for each method."""

from __future__ import annotations

import json

import pytest

from specinfer_runtime.argv import vllm_argv
from tests.support.builders import engine

TARGET = {"name": "meta-llama/Meta-Llama-3.1-8B-Instruct"}


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def spec_config(argv: list[str]) -> dict[str, object]:
    loaded: dict[str, object] = json.loads(flag(argv, "--speculative-config"))
    return loaded


def test_eagle3_full_graph() -> None:
    argv = vllm_argv(
        engine(
            {
                "model": {**TARGET, "servedModelName": "llama3", "source": {"pvc": {"claimName": "m"}}},
                "parallelism": {"tensor": 4},
                "speculative": {
                    "method": "eagle3",
                    "numSpeculativeTokens": 3,
                    "draftModel": {"name": "d/e3"},
                },
                "graph": {"mode": "FULL_DECODE_ONLY", "maxBatchSize": 4},
                "scheduling": {"asyncScheduling": True, "maxNumSeqs": 16},
                "engineArgs": ["--seed", "1024"],
            }
        )
    )
    assert argv == [
        "vllm", "serve", "/models/target", "--served-model-name", "llama3",
        "--host", "0.0.0.0", "--port", "8000", "--tensor-parallel-size", "4",
        "--speculative-config",
        '{"method":"eagle3","num_speculative_tokens":3,"model":"d/e3","draft_tensor_parallel_size":1}',
        "--compilation-config", '{"cudagraph_mode":"FULL_DECODE_ONLY","cudagraph_capture_sizes":[4,8,12,16]}',
        "--async-scheduling", "--max-num-seqs", "16", "--seed", "1024",
    ]  # fmt: skip


def test_suffix_renders_explicit_k_and_every_parameter() -> None:
    argv = vllm_argv(engine({"model": TARGET, "speculative": {"method": "suffix"}}))
    assert spec_config(argv) == {
        "method": "suffix",
        "num_speculative_tokens": 14,
        "suffix_decoding_max_tree_depth": 24,
        "suffix_decoding_max_cached_requests": 10000,
        "suffix_decoding_max_spec_factor": 1.0,
        "suffix_decoding_min_token_prob": 0.1,
    }


@pytest.mark.parametrize(("depth", "k"), [(1, 1), (8, 8), (14, 14), (15, 14), (64, 14)])
def test_suffix_default_k_is_min_of_depth_and_14(depth: int, k: int) -> None:
    argv = vllm_argv(engine({"model": TARGET, "speculative": {"method": "suffix", "suffix": {"maxTreeDepth": depth}}}))
    assert spec_config(argv)["num_speculative_tokens"] == k


def test_mtp_alias_is_rendered_as_mtp_with_k_1() -> None:
    argv = vllm_argv(engine({"model": TARGET, "speculative": {"method": "deepseek_mtp"}}))
    assert spec_config(argv) == {"method": "mtp", "num_speculative_tokens": 1}


def test_ngram_lookup_and_eager_mode() -> None:
    spec = {"method": "ngram", "numSpeculativeTokens": 5, "ngram": {"promptLookupMax": 4}}
    argv = vllm_argv(engine({"model": TARGET, "speculative": spec, "graph": {"mode": "NONE"}}))
    assert spec_config(argv) == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}
    assert "--enforce-eager" in argv
    assert "--compilation-config" not in argv


def test_extract_hidden_states_renders_layers_and_connector() -> None:
    hs = {"layerIds": [2, 18, 34], "storage": {"pvc": {"claimName": "out"}}}
    argv = vllm_argv(engine({"model": TARGET, "speculative": {"method": "extract_hidden_states", "hiddenStates": hs}}))
    assert spec_config(argv) == {
        "method": "extract_hidden_states",
        "num_speculative_tokens": 1,
        "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [2, 18, 34]}},
    }
    assert json.loads(flag(argv, "--kv-transfer-config")) == {
        "kv_connector": "ExampleHiddenStatesConnector",
        "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": "/hidden-states"},
    }


def test_rejection_sampler_goes_to_additional_config() -> None:
    rs = {"blockVerify": True, "entropyVerify": True, "posteriorThreshold": 0.9, "posteriorAlpha": 0.5}
    spec = {
        "method": "eagle3",
        "numSpeculativeTokens": 3,
        "draftModel": {"name": "d"},
        "rejectionSampler": rs,
    }
    argv = vllm_argv(engine({"model": TARGET, "speculative": spec}))
    assert json.loads(flag(argv, "--additional-config")) == {
        "rejection_sampler_config": {
            "enable_block_verify": True,
            "enable_entropy_verify": True,
            "posterior_threshold": 0.9,
            "posterior_alpha": 0.5,
        }
    }


def test_draft_model_on_volume_with_target_tp_and_padding_flag() -> None:
    spec = {
        "method": "draft_model",
        "numSpeculativeTokens": 4,
        "draftModel": {"name": "small", "source": {"hostPath": {"path": "/data/small"}}},
        "draftTensorParallelSize": 2,
        "disablePaddedDrafterBatch": True,
    }
    argv = vllm_argv(
        engine({"model": TARGET, "parallelism": {"tensor": 2, "data": 2, "expert": True}, "speculative": spec})
    )
    assert spec_config(argv) == {
        "method": "draft_model",
        "num_speculative_tokens": 4,
        "model": "/models/draft",
        "draft_tensor_parallel_size": 2,
        "disable_padded_drafter_batch": True,
    }
    assert flag(argv, "--data-parallel-size") == "2"
    assert "--enable-expert-parallel" in argv


def test_model_flags() -> None:
    model = {
        **TARGET,
        "maxModelLen": 36768,
        "quantization": "ascend",
        "trustRemoteCode": True,
        "source": {"huggingFace": {"revision": "v2"}},
    }
    argv = vllm_argv(engine({"model": model, "speculative": {"method": "mtp"}}))
    assert argv[2] == TARGET["name"]
    assert flag(argv, "--served-model-name") == TARGET["name"]
    assert flag(argv, "--max-model-len") == "36768"
    assert flag(argv, "--quantization") == "ascend"
    assert flag(argv, "--revision") == "v2"
    assert "--trust-remote-code" in argv


def test_piecewise_without_sizes_renders_only_the_mode() -> None:
    argv = vllm_argv(engine({"model": TARGET, "speculative": {"method": "mtp"}, "graph": {"mode": "PIECEWISE"}}))
    assert json.loads(flag(argv, "--compilation-config")) == {"cudagraph_mode": "PIECEWISE"}


def test_draft_options_parallel_drafting_and_synthetic_sampling() -> None:
    argv = vllm_argv(
        engine(
            {
                "model": {**TARGET, "maxModelLen": 8192},
                "speculative": {
                    "method": "draft_model",
                    "numSpeculativeTokens": 3,
                    "draftModel": {"name": "d/pard", "maxModelLen": 4096, "quantization": "fp8"},
                    "parallelDrafting": True,
                    "enforceEager": True,
                    "rejectionSampleMethod": "synthetic",
                    "syntheticAcceptanceLength": 2.5,
                },
            }
        )
    )
    assert spec_config(argv) == {
        "method": "draft_model",
        "num_speculative_tokens": 3,
        "model": "d/pard",
        "quantization": "fp8",
        "max_model_len": 4096,
        "parallel_drafting": True,
        "enforce_eager": True,
        "rejection_sample_method": "synthetic",
        "synthetic_acceptance_length": 2.5,
    }


def test_dspark_settings_and_the_dynamic_verify_budget() -> None:
    argv = vllm_argv(
        engine(
            {
                "model": {"name": "Qwen/Qwen3-8B"},
                "speculative": {
                    "method": "dspark",
                    "numSpeculativeTokens": 7,
                    "draftModel": {"name": "d/dspark"},
                    "dspark": {"draftTopK": 8, "adaptiveVerification": True},
                    "dynamicVerification": {"initialVerifyBudgetPerRequest": 4, "minVerifyTokens": 2},
                },
                "graph": {"mode": "FULL_DECODE_ONLY", "maxBatchSize": 2},
            }
        )
    )
    assert spec_config(argv) == {
        "method": "dspark",
        "num_speculative_tokens": 7,
        "model": "d/dspark",
        "dspark_draft_topk": 8,
        "enable_adaptive_verification": True,
    }
    assert json.loads(flag(argv, "--additional-config")) == {
        "dynamic_spec_config": {
            "method": "dspark",
            "method_params": {
                "initial_verify_budget_per_req": 4,
                "budget_update_interval": 16,
                "budget_threshold": 0.3,
                "min_verify_tokens": 2,
            },
        }
    }


def test_unset_new_options_leave_the_engine_config_as_before() -> None:
    """Options added later render nothing unless set, so an operator upgrade restarts no pod."""
    spec = engine({"model": TARGET, "speculative": {"method": "ngram", "numSpeculativeTokens": 4}})
    assert set(spec.dump()["speculative"]) == {"method", "numSpeculativeTokens", "disablePaddedDrafterBatch"}
