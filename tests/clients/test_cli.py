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
    return subprocess.run([sys.executable, "-m", "launch", *args], capture_output=True, text=True, env=env,
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
    (("--gpu", "A100"), "'A100' names 2 GPUs: a100-40gb (A100 SXM4 40GB, 40 GB), a100-80gb"),  # not one silently
    (("--gpu", "a100-80gb", "--lora-r", "99999"), "training.lora.rank: rank 99999 is larger than the hidden size"),
    (("--gpu", "a100-80gb", "--zero", "5"), "argument --zero: invalid choice"),
    (("--gpu", "a100-80gb", "--micro-batch", "-2"), "argument --micro-batch: must be 1 or more"),
    (("--flavor", "v5e-2x2"), "hardware.flavor: 'v5e-2x2' has no GPU"),
    ((), "name the hardware with --gpu"),
    (("--gpu", "a100-80gb", "--dpo-beta", "0.2"), "are DPO knobs: add --dpo"),
    (("--gpu", "a100-80gb", "--dpo", "--dpo-label-smoothing", "0.6"), "training.dpo.label_smoothing"),
    (("--gpu", "a100-80gb", "--dpo", "--dpo-sft-weight", "-1"), "argument --dpo-sft-weight: must be a finite number"),
    (("--gpu", "a100-80gb", "--gpus", "2", "--zero", "3", "--sharding", "fsdp"),
     "training.sharding: FSDP is modelled under recipe hf-trainer so far, not tunefleet"),
    (("--gpu", "a100-80gb", "--gpus", "2", "--recipe", "hf-trainer", "--sharding", "fsdp"),
     "training.sharding: FSDP is planned as FULL_SHARD, which shards like ZeRO stage 3; set zero_stage 3"),
    (("--gpu", "a100-80gb", "--load-dtype", "fp32"), "training.load_dtype: fp32 loading is a Trainer recipe's script"),
    (("--gpu", "a100-80gb", "--sharding", "ddp"), "argument --sharding: invalid choice"),
    (("--gpu", "a100-80gb", "--liger"), "training.liger: Liger's kernels are the Trainer's use_liger_kernel"),
])
def test_bad_input_says_what_to_change(args: tuple[str, ...], message: str) -> None:
    out = tunefleet("fit", "--model", "meta-llama/Llama-3.1-8B", *args)
    assert out.returncode == 2 if "argument" in message else out.returncode != 0
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_fit_plans_the_trainer_under_fsdp_with_the_frozen_shards_in_the_dtype_the_script_loaded() -> None:
    """PEFT's Llama-2-70B FSDP example on 8 H100s as a user asks for it: fp32 loading doubles the frozen shards (the
    units are gathered in bf16 either way), which is what separates its 72-80 GB from a bf16 load."""
    args = ("fit", "--model", "meta-llama/Llama-3.1-70B", "--gpu", "h100-sxm-80gb", "--gpus", "8", "--zero", "3",
            "--recipe", "hf-trainer", "--sharding", "fsdp", "--micro-batch", "1", "--seq-len", "2048", "--json")
    bf16, fp32 = tunefleet(*args), tunefleet(*args, "--load-dtype", "fp32")
    assert bf16.returncode == 0 and fp32.returncode == 0, bf16.stderr + fp32.stderr
    weights = [json.loads(out.stdout)["per_gpu"]["weights_bytes"] for out in (bf16, fp32)]
    assert weights[1] == pytest.approx(2 * weights[0], rel=1e-6)


def test_fit_plans_liger_s_fused_loss_under_the_trainer() -> None:
    """Llama-3.1-8B LoRA at 2 x 4,096 tokens under transformers' Trainer: Liger's fused loss never builds the
    128,256-word logits, whose fp32 copies make the plain Trainer's peak; Gemma 2's Liger patch is not simulated."""
    args = ("fit", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm-80gb", "--recipe", "hf-trainer",
            "--micro-batch", "2", "--seq-len", "4096", "--json")
    plain, liger = tunefleet(*args), tunefleet(*args, "--liger")
    assert plain.returncode == 0 and liger.returncode == 0, plain.stderr + liger.stderr
    logits = [json.loads(out.stdout)["per_gpu"]["logits_bytes"] for out in (plain, liger)]
    assert logits[1] < logits[0] / 10
    gemma = tunefleet("fit", "--model", "google/gemma-2-9b", "--gpu", "h100-sxm-80gb", "--recipe", "hf-trainer",
                      "--attention", "eager", "--liger")
    assert gemma.returncode != 0 and "training.liger" in gemma.stderr


def test_fit_plans_the_transformers_release_a_trainer_script_runs() -> None:
    """fms-acceleration's Llama-2-70B QLoRA on two A100s ran transformers 4.45.2, whose checkpointing keeps every
    layer's input gradient under FSDP: that plan holds about 10 GiB more than today's release's; a release that is
    not one is refused, naming the field."""
    args = ("fit", "--model", "NousResearch/Llama-2-70b-hf", "--method", "qlora", "--gpu", "a100-80gb", "--gpus", "2",
            "--zero", "3", "--recipe", "hf-trainer", "--sharding", "fsdp", "--micro-batch", "2", "--seq-len", "4096",
            "--json")
    today, old = tunefleet(*args), tunefleet(*args, "--transformers-version", "4.45.2")
    assert today.returncode == 0 and old.returncode == 0, today.stderr + old.stderr
    totals = [json.loads(out.stdout)["per_gpu"]["total_bytes"] for out in (today, old)]
    assert totals[1] - totals[0] > 8 * 2**30
    bad = tunefleet(*args, "--transformers-version", "latest")
    assert bad.returncode == 2 and "training.transformers_version" in bad.stderr and "4.45.2" in bad.stderr


def test_unknown_model_suggests_close_names() -> None:
    out = tunefleet("fit", "--model", "meta-llama/Llama-3.1-8b-instruct", "--gpu", "a100-80gb")
    assert out.returncode == 0, out.stderr  # names are case-insensitive
    out = tunefleet("fit", "--model", "meta-llama/Llama-3.2-7B", "--gpu", "a100-80gb")
    assert out.returncode == 2 and "Did you mean" in out.stderr


def test_estimate_and_recommend_print_tables() -> None:
    est = tunefleet("estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--gpu", "rtx-4090",
                    "--tokens", "10M")
    assert est.returncode == 0, est.stderr
    assert "cost" in est.stdout and "$" in est.stdout
    rec = tunefleet("recommend", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--tokens", "10M",
                    "--limit", "3")
    assert rec.returncode == 0, rec.stderr
    assert "plan" in rec.stdout
    full = tunefleet("recommend", "--model", "meta-llama/Llama-3.1-8B", "--method", "full", "--tokens", "10M",
                     "--limit", "3")
    assert full.returncode == 0, full.stderr
    assert "Rejected" in full.stdout and "host RAM too small" in full.stdout


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


def test_fit_and_estimate_exit_status_says_whether_it_fits(planner_address: str) -> None:
    """0 fits, 3 does not fit, 2 bad input, 4 planner unreachable: a script can branch without parsing the table."""
    base = ("--model", "meta-llama/Llama-3.1-8B", "--method", "full", "--micro-batch", "1", "--seq-len", "2048")
    for command, extra in (("fit", ()), ("estimate", ("--tokens", "10M"))):
        job = (*base, *extra)
        fits = tunefleet(command, *job, "--gpu", "h100-sxm-80gb", "--gpus", "8", "--zero", "3")
        too_big = tunefleet(command, *job, "--gpu", "rtx-4090")
        bad = tunefleet(command, *job, "--gpu", "rtx-4090", "--zero", "7")
        assert fits.returncode == 0 and "FITS" in fits.stdout, fits.stderr
        assert too_big.returncode == 3 and "DOES NOT FIT" in too_big.stdout, too_big.stderr
        assert bad.returncode == 2 and "zero" in bad.stderr.lower(), bad.stderr
        remote = tunefleet(command, *job, "--gpu", "rtx-4090", address=planner_address)
        assert remote.returncode == 3, remote.stderr
    unreachable = tunefleet("fit", *base, "--gpu", "rtx-4090", address="127.0.0.1:1")
    assert unreachable.returncode == 4 and "unavailable" in unreachable.stderr
    assert "3 does not fit" in tunefleet("fit", "--help").stdout


def test_cost_is_free_at_price_zero_and_unknown_without_a_price() -> None:
    job = ("estimate", "--model", "Qwen/Qwen2.5-0.5B", "--method", "lora", "--tokens", "1M", "--json")
    free = tunefleet(*job, "--gpu", "a100-80gb", "--price-per-hour", "0")
    unpriced = tunefleet(*job, "--gpu", "rtx-2080-8gb")
    assert free.returncode == 0, free.stderr
    assert unpriced.returncode in (0, 3), unpriced.stderr
    free_estimate, unpriced_estimate = json.loads(free.stdout)["estimate"], json.loads(unpriced.stdout)["estimate"]
    assert free_estimate["priced"] is True and free_estimate.get("cost_usd", 0) == 0
    assert unpriced_estimate.get("priced", False) is False
    text = tunefleet(*job[:-1], "--gpu", "rtx-2080-8gb").stdout
    assert "$0.00" not in text and "unknown: pass --price-per-hour" in text
    negative = tunefleet(*job, "--gpu", "a100-80gb", "--price-per-hour", "-1")
    assert negative.returncode == 2 and "--price-per-hour" in negative.stderr


def test_a_table_piped_into_a_reader_that_stops_early_ends_quietly() -> None:
    reader = subprocess.Popen([sys.executable, "-m", "launch", "hardware"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env={**os.environ, "TUNEFLEET_PLANNER": ""})
    assert reader.stdout is not None
    reader.stdout.close()  # the reader is gone before the table is written, like `| head -0`
    _, stderr = reader.communicate(timeout=120)
    assert reader.returncode == 0 and "BrokenPipeError" not in stderr and "Traceback" not in stderr


def test_a_missing_model_folder_is_named_and_a_saved_plan_keeps_the_absolute_path(tmp_path: Path) -> None:
    missing = tunefleet("fit", "--model", "./no-such-model", "--method", "lora", "--gpu", "a100-80gb")
    assert missing.returncode == 2 and "./no-such-model does not exist" in missing.stderr
    assert "unknown model" not in missing.stderr
    (tmp_path / "tiny").mkdir()
    (tmp_path / "tiny" / "config.json").write_text(json.dumps(
        {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128,
         "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 512}))
    out = subprocess.run([sys.executable, "-m", "launch", "recommend", "--model", "./tiny", "--method", "lora",
                          "--seq-len", "256", "--tokens", "1M", "--json"], capture_output=True, text=True,
                         cwd=tmp_path, env={**os.environ, "TUNEFLEET_PLANNER": "",
                                            "PYTHONPATH": str(Path(__file__).parents[2])}, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["plan"]["model"]["weights"] == str(tmp_path / "tiny")


def test_an_instruct_variant_is_answered_under_its_own_name_with_its_base_shape() -> None:
    base = json.loads(tunefleet("fit", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "a100-80gb", "--json").stdout)
    out = tunefleet("fit", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "a100-80gb", "--json")
    instruct = json.loads(out.stdout)
    assert instruct["model"]["name"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "same architecture as meta-llama/Llama-3.1-8B" in instruct["model"]["source"]
    assert instruct["per_gpu"] == base["per_gpu"]


def test_a_sequence_beyond_a_catalog_models_context_is_refused() -> None:
    out = tunefleet("fit", "--model", "microsoft/Phi-3-mini-4k-instruct", "--gpu", "a100-80gb", "--seq-len", "8192")
    assert out.returncode == 2 and "context" in out.stderr and "4,096" in out.stderr


def test_a_gpu_without_bf16_gets_fp16_unless_bf16_was_asked_for() -> None:
    job = ("--model", "Qwen/Qwen2.5-0.5B", "--method", "lora", "--seq-len", "1024")
    auto = tunefleet("fit", *job, "--gpu", "t4", "--json")
    assert auto.returncode == 0, auto.stderr
    result = json.loads(auto.stdout)
    assert result["training"]["precision"] == "PRECISION_FP16"
    assert any("no bf16: planned fp16" in note for note in result["notes"])
    asked = tunefleet("fit", *job, "--gpu", "t4", "--precision", "bf16")
    assert asked.returncode == 3 and "use --precision fp16" in asked.stdout
    on_bf16_gpu = json.loads(tunefleet("fit", *job, "--gpu", "l4", "--json").stdout)
    assert on_bf16_gpu["training"]["precision"] == "PRECISION_BF16"
    rec = tunefleet("recommend", *job, "--tokens", "1M", "--allow-gpu", "t4", "--json")
    plan = json.loads(rec.stdout)["plan"]
    assert plan["hardware"]["gpu"].startswith("t4") and plan["training"]["precision"] == "PRECISION_FP16"


def test_a_provider_typo_is_refused_with_a_suggestion_and_the_hardware_table_cites_sources() -> None:
    typo = tunefleet("recommend", "--model", "Qwen/Qwen2.5-0.5B", "--tokens", "1M", "--provider", "hugingface")
    assert typo.returncode == 2
    assert "constraints.allowed_providers[0]" in typo.stderr and "Did you mean huggingface" in typo.stderr
    table = tunefleet("hardware").stdout
    assert "spec source" in table and "price source" in table and "(read 2026-11)" in table


def test_fit_gives_a_likely_range_says_tight_and_honours_a_margin() -> None:
    job = ("fit", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora", "--seq-len", "2048", "--json")
    roomy = json.loads(tunefleet(*job, "--gpu", "h100-sxm-80gb").stdout)
    total = int(roomy["per_gpu"]["total_bytes"])
    assert int(roomy["total_low_bytes"]) < total < int(roomy["total_high_bytes"])
    assert "make bench-simulate" in roomy["band_basis"] and not roomy.get("tight", False)
    longer = (*job[:5], "--seq-len", "2560")
    close = tunefleet(*longer, "--gpu", "rtx-4090")  # 22.8 GiB planned on 24 GiB, likely up to ~25
    assert close.returncode == 0 and close.stdout.startswith("FITS (tight)") and "likely range" in close.stdout
    margin = tunefleet(*longer, "--gpu", "rtx-4090", "--margin", "15%")
    assert margin.returncode == 3 and "15% margin" in margin.stdout
    assert tunefleet(*job, "--gpu", "h100-sxm-80gb", "--margin", "15%").returncode == 0
    bad = tunefleet(*job, "--gpu", "h100-sxm-80gb", "--margin", "150%")
    assert bad.returncode == 2 and "--margin" in bad.stderr
    qlora = json.loads(tunefleet(*job[:4], "qlora", *job[5:], "--gpu", "h100-sxm-80gb").stdout)
    assert "make bench-simulate" in qlora["band_basis"]  # simulated with bitsandbytes' kernels under fake tensors
    int8 = json.loads(tunefleet(*job[:4], "lora-8bit", *job[5:], "--gpu", "h100-sxm-80gb").stdout)
    assert "make bench-simulate" in int8["band_basis"]  # LLM.int8's kernels as CUDA allocates, under fake tensors


def test_an_inference_fit_sizes_weights_and_the_kv_cache_of_a_batch(planner_address: str) -> None:
    job = ("fit", "--inference", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "l4", "--seq-len", "8192", "--json")
    two, eight = (json.loads(tunefleet(*job, "--micro-batch", n).stdout) for n in ("2", "8"))
    # Llama-3.1-8B keeps 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 128 KiB of cache a token
    per_token = 2 * 32 * 8 * 128 * 2
    assert int(eight["per_gpu"]["activations_bytes"]) - int(two["per_gpu"]["activations_bytes"]) >= \
        6 * 8192 * per_token
    assert two["inference"] and two["fits"] and not eight["fits"]
    assert int(two["per_gpu"].get("gradients_bytes", 0)) == int(two["per_gpu"].get("optimizer_bytes", 0)) == 0
    assert 2 <= two["max_micro_batch"] < 8 and any("KV cache" in n for n in two["notes"])
    quantised = json.loads(tunefleet(*job, "--micro-batch", "2", "--method", "qlora").stdout)
    # NF4 linears; the embedding and lm_head stay bf16
    assert int(quantised["per_gpu"]["weights_bytes"]) < 0.4 * int(two["per_gpu"]["weights_bytes"])
    remote = tunefleet(*job[:-1], "--micro-batch", "8", address=planner_address)
    assert remote.returncode == 3 and "serving 8 sequence(s) of 8,192 tokens" in remote.stdout


def test_a_saved_plan_carries_what_a_worker_may_change_after_an_out_of_memory(tmp_path: Path) -> None:
    plan_path = tmp_path / "plan.json"
    base = ("recommend", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "1M", "--limit", "1")
    out = tunefleet(*base, "--on-oom", "halve-micro-batch,qlora", "--max-replans", "5", "--deterministic",
                    "--save-plan", str(plan_path))
    assert out.returncode == 0, out.stderr
    saved = json.loads(plan_path.read_text())
    assert saved["onOom"] == {"moves": ["OOM_MOVE_HALVE_MICRO_BATCH", "OOM_MOVE_QLORA"], "maxReplans": 5}
    assert saved["hyperparameters"]["deterministic"] is True
    for args, words in ((("--on-oom", "halve-micro-batch,shrink"), "argument --on-oom: unknown move 'shrink'"),
                        (("--on-oom", "qlora,qlora"), "'qlora' is given twice"),
                        (("--max-replans", "17"), "--max-replans: at most 16"),
                        (("--methods", "lora,bogus"), "argument --methods: unknown method 'bogus'")):
        out = tunefleet(*base, *args, "--save-plan", str(tmp_path / "bad.json"))
        assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert not (tmp_path / "bad.json").exists()
