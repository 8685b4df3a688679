"""The tunefleet CLI as a user runs it: real subprocesses, in-process and against a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

STABLE_FIT_KEYS = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "overhead_bytes",
                   "total_bytes")


def tunefleet(*args: str, address: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TUNEFLEET_PLANNER": address}
    return subprocess.run([sys.executable, "-m", "clients.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120, check=False)


def test_fit_json_has_the_stable_contract_fields() -> None:
    out = tunefleet("fit", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--gpu", "rtx-4090",
                    "--micro-batch", "1", "--seq-len", "2048", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert isinstance(data["fits"], bool) and data["fits"]
    for key in STABLE_FIT_KEYS:
        assert isinstance(data["per_gpu"][key], int)
    assert data["per_gpu"]["total_bytes"] < data["capacity_bytes"]
    assert isinstance(data["host"]["total_bytes"], int) and data["max_micro_batch"] >= 1


def test_fit_against_a_server_matches_in_process(planner_address: str) -> None:
    args = ("fit", "--model", "Qwen/Qwen2.5-7B", "--method", "full", "--gpu", "a100-80gb", "--gpus", "4",
            "--zero", "3", "--json")
    remote, local = tunefleet(*args, address=planner_address), tunefleet(*args)
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout) == json.loads(local.stdout)


def test_config_json_folder_is_accepted(tmp_path: Path) -> None:
    config = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 688,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000}
    (tmp_path / "config.json").write_text(json.dumps(config))
    out = tunefleet("fit", "--model", str(tmp_path), "--method", "full", "--gpu", "t4", "--precision", "fp16",
                    "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["model"]["architecture"]["num_layers"] == 4


@pytest.mark.parametrize(("args", "message"), [
    (("--gpu", "rtx-9999"), "hardware.gpu: unknown GPU 'rtx-9999'"),
    (("--gpu", "a100", "--lora-r", "99999"), "training.lora.rank: rank 99999 is larger than the hidden size"),
    (("--gpu", "a100", "--zero", "5"), "argument --zero: invalid choice"),
    (("--gpu", "a100", "--micro-batch", "-2"), "argument --micro-batch: must be 1 or more"),
    (("--flavor", "v5e-2x2"), "hardware.flavor: 'v5e-2x2' has no GPU"),
    ((), "name the hardware with --gpu"),
    (("--gpu", "a100", "--dpo-beta", "0.2"), "are DPO knobs: add --dpo"),
    (("--gpu", "a100", "--dpo", "--dpo-label-smoothing", "0.6"), "training.dpo.label_smoothing"),
    (("--gpu", "a100", "--dpo", "--dpo-sft-weight", "-1"), "argument --dpo-sft-weight: must be a finite number"),
])
def test_bad_input_says_what_to_change(args: tuple[str, ...], message: str) -> None:
    out = tunefleet("fit", "--model", "meta-llama/Llama-3.1-8B", *args)
    assert out.returncode == 2 if "argument" in message else out.returncode != 0
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_unknown_model_suggests_close_names() -> None:
    out = tunefleet("fit", "--model", "meta-llama/Llama-3.1-8b-instruct", "--gpu", "a100")
    assert out.returncode == 0, out.stderr  # names are case-insensitive
    out = tunefleet("fit", "--model", "meta-llama/Llama-3.2-7B", "--gpu", "a100")
    assert out.returncode == 2 and "Did you mean" in out.stderr


def test_estimate_and_recommend_print_tables() -> None:
    est = tunefleet("estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--gpu", "rtx-4090",
                    "--tokens", "10M")
    assert est.returncode == 0, est.stderr
    assert "cost" in est.stdout and "$" in est.stdout
    rec = tunefleet("recommend", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--tokens", "10M",
                    "--limit", "3")
    assert rec.returncode == 0, rec.stderr
    assert "plan" in rec.stdout and "Rejected" in rec.stdout


def test_help_teaches_with_examples() -> None:
    out = tunefleet("fit", "--help")
    assert out.returncode == 0 and "examples:" in out.stdout and "--grad-ckpt" in out.stdout


@pytest.mark.parametrize(("flag", "value", "words"), [("--price-per-hour", "nan", "not a finite number"),
                                                      ("--epochs", "inf", "not a finite number"),
                                                      ("--tokens", "1e999", "too large to be a count"),
                                                      ("--lora-dropout", "1.5", "less than 1")])
def test_cli_refuses_numbers_that_are_not_finite_or_in_range(flag: str, value: str, words: str) -> None:
    """Issue 9, item 3: the CLI took --price-per-hour nan (and 1e999 tokens raised OverflowError)."""
    out = tunefleet("estimate", "--model", "Qwen/Qwen2.5-7B", "--gpu", "a100-80gb", "--tokens", "10M",
                    flag, value)
    assert out.returncode == 2 and words in out.stderr and flag in out.stderr and "Traceback" not in out.stderr
