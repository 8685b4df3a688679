"""Real DeepSpeed + PEFT training of a tiny Llama on the CPU (DS_ACCELERATOR=cpu, gloo), 1 and 2 ranks."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
import torch
import transformers
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
from peft import LoraConfig, PeftModel, get_peft_model
from tunefleet.v1 import plan_pb2, progress_pb2, training_pb2

from common.wait import wait_until
from contract.errors import HostError, PlanError
from contract.progress import read_events
from contract.training import training_from_proto
from devtools.tiny import LINEAR_MODULES, counting_text, make_plan, write_plan
from executor.training import checkpoint
from executor.training.launcher import train
from executor.training.model import quantization
from tests.integration.training_helpers import exported as exported_tensors
from tests.integration.training_helpers import logits as _logits
from tests.integration.training_helpers import wait_for_phase as _wait_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
LORA, FULL = training_pb2.METHOD_LORA, training_pb2.METHOD_FULL
_GROUP_EXIT_S = 60.0


def _phases(events: list[progress_pb2.ProgressEvent]) -> list[int]:
    return [e.phase for e in events]


def _model_from_checkpoint(base_dir: Path, ckpt: Path, method: int) -> torch.nn.Module:
    """The trained model rebuilt from DeepSpeed's fp32 partitions, independently of save_pretrained."""
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir)
    if method == LORA:
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                 target_modules=list(LINEAR_MODULES)))
    state = get_fp32_state_dict_from_zero_checkpoint(str(ckpt), tag=checkpoint.DEEPSPEED_TAG)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected
    trained = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trained.isdisjoint(missing)
    return model


@pytest.mark.parametrize(("method", "zero_stage", "ranks"), [
    (LORA, 2, 1), (LORA, 3, 2), (FULL, 2, 2), (FULL, 3, 1),
], ids=["lora-zero2-1rank", "lora-zero3-2ranks", "full-zero2-2ranks", "full-zero3-1rank"])
def test_training_learns_and_exports_what_it_trained(tiny_model: Path, counting_data: Path, tmp_path: Path,
                                                     method: int, zero_stage: int, ranks: int) -> None:
    out = tmp_path / "run"
    plan = make_plan(tiny_model, counting_data, out, method=method, zero_stage=zero_stage, ranks=ranks,
                     max_steps=24, checkpoint_every=12, learning_rate=1e-2 if method == LORA else 3e-3)
    result = train(write_plan(plan, tmp_path / "plan.json"), progress_interval_s=0)

    assert result.succeeded, result.last_event.message
    events = read_events(out / "progress.jsonl")
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    phases = _phases(events)  # loading (and, after a DeepSpeed upgrade, building its CPU ops once), then preflight
    assert progress_pb2.PHASE_PREFLIGHT in phases
    assert set(phases[:phases.index(progress_pb2.PHASE_PREFLIGHT)]) == {progress_pb2.PHASE_LOADING}
    losses = [e.loss for e in events if e.phase == progress_pb2.PHASE_TRAINING]
    assert len(losses) == 24
    assert sum(losses[-4:]) / 4 < 0.85 * sum(losses[:4]) / 4, losses
    assert [e.step for e in events if e.phase == progress_pb2.PHASE_CHECKPOINTING] == [12, 24]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps_this_run"] == 24 and summary["feedback"]["measured_step_time_s"] > 0
    assert summary["feedback"]["measured_tokens_per_s"] > 0

    ids = torch.tensor([[2, 8, 9, 10, 11, 12, 13]])
    base = transformers.AutoModelForCausalLM.from_pretrained(tiny_model)
    if method == LORA:
        exported = PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(tiny_model),
                                             out / "final")
        assert (out / "final" / "adapter_model.safetensors").is_file()
    else:
        exported = transformers.AutoModelForCausalLM.from_pretrained(out / "final")
    rebuilt = _model_from_checkpoint(tiny_model, checkpoint.step_dir(out / "checkpoints", 24), method)
    torch.testing.assert_close(_logits(exported, ids), _logits(rebuilt, ids), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(_logits(exported, ids), _logits(base, ids), atol=1e-3)
    assert transformers.AutoTokenizer.from_pretrained(out / "final").chat_template


@pytest.mark.parametrize(("method", "zero_stage", "ranks"), [
    (training_pb2.METHOD_QLORA, 0, 1), (training_pb2.METHOD_LORA_8BIT, 2, 2),
], ids=["qlora-zero0-1rank", "lora8bit-zero2-2ranks"])
def test_quantised_training_learns_on_the_cpu_and_exports_its_adapter(tiny_model: Path, counting_data: Path,
                                                                      tmp_path: Path, method: int, zero_stage: int,
                                                                      ranks: int) -> None:
    """The executor's bitsandbytes path for real (bitsandbytes' CPU kernels): the base loaded quantised,
    prepare_model_for_kbit_training, DeepSpeed, checkpoints, the adapter exported."""
    out = tmp_path / "run"
    plan = make_plan(tiny_model, counting_data, out, method=method, zero_stage=zero_stage, ranks=ranks, max_steps=24,
                     checkpoint_every=12, precision=training_pb2.PRECISION_BF16)
    result = train(write_plan(plan, tmp_path / "plan.json"), progress_interval_s=0)

    assert result.succeeded, result.last_event.message
    events = read_events(out / "progress.jsonl")
    losses = [e.loss for e in events if e.phase == progress_pb2.PHASE_TRAINING]
    assert len(losses) == 24
    assert sum(losses[-4:]) / 4 < 0.85 * sum(losses[:4]) / 4, losses
    assert [e.step for e in events if e.phase == progress_pb2.PHASE_CHECKPOINTING] == [12, 24]
    base = transformers.AutoModelForCausalLM.from_pretrained(
        tiny_model, quantization_config=quantization(training_from_proto(plan.training, ranks)), device_map={"": "cpu"})
    ids = torch.tensor([[2, 8, 9, 10, 11, 12, 13]])
    before = _logits(base, ids)
    tuned = PeftModel.from_pretrained(base, out / "final")
    assert not torch.allclose(_logits(tuned, ids), before, atol=1e-3)


def _group_gone(pgid: int) -> bool:
    """Wait (bounded) for every process of the group to exit."""
    members = []
    for p in psutil.process_iter():
        try:
            if os.getpgid(p.pid) == pgid:
                members.append(p)
        except (ProcessLookupError, psutil.Error):
            continue
    _, alive = psutil.wait_procs(members, timeout=_GROUP_EXIT_S)
    return not alive


def _losses(events: list[progress_pb2.ProgressEvent]) -> dict[int, float]:
    return {e.step: e.loss for e in events if e.phase == progress_pb2.PHASE_TRAINING}


# Issue 28, item 3: a run killed at a random step after a checkpoint and resumed ends bit for bit where the
# uninterrupted run ends (every weight, and every loss after the resume), for LoRA with dropout and full
# fine-tuning, packed and not, under ZeRO 0, 2 and 3.
# LoRA with dropout (whose random state must resume) under ZeRO-3's partitioned checkpoint, and a full fine-tune's
# under ZeRO-0; ZeRO-2's resume runs in the fleet's tests (test_resilience, test_multinode)
@pytest.mark.parametrize(("method", "zero_stage", "dropout", "packing"), [
    (FULL, 0, 0.0, True), (LORA, 3, 0.1, True),
], ids=["full-zero0-packed", "lora-zero3-dropout-packed"])
def test_sigkill_after_a_checkpoint_resumes_to_the_same_end_bit_for_bit(
        tiny_model: Path, tmp_path: Path, method: int, zero_stage: int, dropout: float, packing: bool) -> None:
    data = counting_text(tmp_path / "data.jsonl", records=96)
    steps, every = 30, 10
    kill_after = random.Random().randint(every, 2 * every - 1)  # any step between two checkpoints

    def plan_for(out: Path) -> Path:
        plan = make_plan(tiny_model, data, out, method=method, zero_stage=zero_stage, ranks=2, max_steps=steps,
                         checkpoint_every=every, grad_accum=2)
        plan.training.lora.dropout = dropout
        plan.dataset.packing = packing
        # the deterministic-kernels opt-in changes nothing on the CPU (already bitwise); here it must run as well
        plan.hyperparameters.deterministic = method == FULL
        return write_plan(plan, out.parent / f"{out.name}.json")

    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "executor.training", str(plan_for(killed)),
                             "--progress-interval-s", "0"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        first = _wait_for(killed / "progress.jsonl", progress_pb2.PHASE_CHECKPOINTING, proc)
        wait_until(lambda: proc.poll() is not None
                   or max(_losses(read_events(killed / "progress.jsonl")), default=0) >= kill_after, 300, 0.01)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    before = read_events(killed / "progress.jsonl")
    assert before[-1].phase != progress_pb2.PHASE_DONE, "the run ended before it could be killed"
    assert first.step == every

    # A later checkpoint cut mid-write (no manifest) and one truncated after sealing must both be ignored.
    sealed = checkpoint.step_dir(killed / "checkpoints", every)
    subprocess.run(["cp", "-r", str(sealed), str(checkpoint.step_dir(killed / "checkpoints", every + 1))], check=True)
    (checkpoint.step_dir(killed / "checkpoints", every + 1) / checkpoint.MANIFEST).unlink()
    truncated = checkpoint.step_dir(killed / "checkpoints", every + 2)
    subprocess.run(["cp", "-r", str(sealed), str(truncated)], check=True)
    with (truncated / checkpoint.TRAINER_STATE).open("a") as f:
        f.write(" ")
    assert [s for s, _ in checkpoint.complete_checkpoints(killed / "checkpoints")][-1] >= every

    resumed = train(killed.parent / "killed.json", progress_interval_s=0)
    assert resumed.succeeded, resumed.last_event.message
    after = read_events(killed / "progress.jsonl")[len(before):]
    resume_event = next(e for e in after if e.phase == progress_pb2.PHASE_LOADING and e.step)
    assert resume_event.step >= every and f"step {resume_event.step}" in resume_event.message
    assert resume_event.step % every == 0, "resumed from a checkpoint that was cut or truncated"
    assert after[-1].phase == progress_pb2.PHASE_DONE and after[-1].step == steps
    state, _ = checkpoint.latest(killed / "checkpoints") or (None, None)
    assert state is not None and state.step == steps and state.next_micro_batch == steps * 2

    straight = tmp_path / "straight"
    assert train(plan_for(straight), progress_interval_s=0).succeeded
    ours, theirs = exported_tensors(killed), exported_tensors(straight)
    assert ours.keys() == theirs.keys()
    resumed_losses, straight_losses = _losses(after), _losses(read_events(straight / "progress.jsonl"))
    assert resumed_losses
    for name, tensor in ours.items():
        assert torch.equal(tensor, theirs[name]), f"{name} differs (killed after step {kill_after})"
    assert resumed_losses == {k: straight_losses[k] for k in resumed_losses}


def _zero3(plan: plan_pb2.Plan, method: int) -> None:
    plan.training.method, plan.training.zero_stage = method, 3
    config = json.loads(plan.deepspeed_config_json)
    config["zero_optimization"]["stage"] = 3
    plan.deepspeed_config_json = json.dumps(config)


@pytest.mark.parametrize(("change", "error", "words"), [
    (lambda p, d: setattr(p.dataset, "local_path", str(d / "missing.jsonl")), PlanError, "does not exist"),
    (lambda p, d: setattr(p.dataset, "local_path", str((d / "empty.jsonl").resolve())), PlanError, "no records"),
    (lambda p, d: p.training.lora.target_modules.append("c_attn"), PlanError, "c_attn not in this model"),
    (lambda p, d: setattr(p.training, "sequence_length", 0), PlanError, "training.sequence_length"),
    (lambda p, d: _zero3(p, training_pb2.METHOD_QLORA), HostError, "qlora under ZeRO-3 needs a CUDA GPU"),
    (lambda p, d: setattr(p.training, "precision", training_pb2.PRECISION_FP16), HostError,
     "fp16 mixed precision needs a CUDA GPU"),
])
def test_bad_plans_fail_before_training(tiny_model: Path, counting_data: Path, tmp_path: Path, change: object,
                                        error: type[Exception], words: str) -> None:
    (tmp_path / "empty.jsonl").write_text("\n")
    plan: plan_pb2.Plan = make_plan(tiny_model, counting_data, tmp_path / "run")
    change(plan, tmp_path)  # type: ignore[operator]
    with pytest.raises(error, match=words):
        train(write_plan(plan, tmp_path / "plan.json"))
    assert not (tmp_path / "run" / "logs").exists(), "nothing may start before the plan is checked"


def test_cli_check_says_what_the_run_would_be_and_trains_nothing(tiny_model: Path, counting_data: Path,
                                                                  tmp_path: Path) -> None:
    plan = make_plan(tiny_model, counting_data, tmp_path / "run", ranks=2, max_steps=5, grad_accum=2)
    proc = subprocess.run([sys.executable, "-m", "launch", "train", "--check",
                           str(write_plan(plan, tmp_path / "p.json"))], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "plan tiny-plan can run here: 64 examples" in proc.stdout
    assert "5 steps of 2 x 2 rank(s) x 2 micro-batches" in proc.stdout
    assert not (tmp_path / "run").exists()


def test_cli_reports_a_bad_plan_and_exits_2(tiny_model: Path, counting_data: Path, tmp_path: Path) -> None:
    plan = make_plan(tiny_model, counting_data, tmp_path / "run", target_modules=("gate",))
    proc = subprocess.run([sys.executable, "-m", "launch", "train", str(write_plan(plan, tmp_path / "p.json"))],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "training.lora.target_modules: gate not in this model" in proc.stderr
    assert "q_proj" in proc.stderr


def test_a_crashing_rank_fails_the_run_with_its_error_and_keeps_the_logs(tiny_model: Path, counting_data: Path,
                                                                          tmp_path: Path) -> None:
    plan = make_plan(tiny_model, counting_data, tmp_path / "run")
    config = json.loads(plan.deepspeed_config_json)
    config["optimizer"]["type"] = "NoSuchOptimizer"  # valid JSON for the plan checks, refused inside DeepSpeed
    plan.deepspeed_config_json = json.dumps(config)
    result = train(write_plan(plan, tmp_path / "plan.json"), progress_interval_s=0)
    assert not result.succeeded and result.exit_code != 0
    assert result.last_event.phase == progress_pb2.PHASE_FAILED
    assert "nosuchoptimizer" in result.last_event.message.lower()
    assert "NoSuchOptimizer" in (tmp_path / "run" / "logs" / "train.log").read_text()
    assert (tmp_path / "run" / "plan.json").is_file()
    assert [e.phase for e in read_events(tmp_path / "run" / "progress.jsonl")].count(progress_pb2.PHASE_FAILED) == 1


def test_sigterm_cancels_cleanly_and_the_plan_resumes(tiny_model: Path, tmp_path: Path) -> None:
    data = counting_text(tmp_path / "data.jsonl", records=64)
    out = tmp_path / "run"
    plan_path = write_plan(make_plan(tiny_model, data, out, max_steps=400, checkpoint_every=10), tmp_path / "p.json")
    proc = subprocess.Popen([sys.executable, "-m", "executor.training", str(plan_path), "--progress-interval-s", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(out / "progress.jsonl", progress_pb2.PHASE_CHECKPOINTING, proc)
        proc.send_signal(signal.SIGTERM)  # to the launcher only, as a worker's cancel does
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert _group_gone(proc.pid), "training ranks outlived the cancelled launcher"
    events = read_events(out / "progress.jsonl")
    assert events[-1].phase == progress_pb2.PHASE_CANCELLED, stderr
    assert proc.returncode == 1 and "cancelled" in stderr
    assert checkpoint.latest(out / "checkpoints") is not None


@pytest.fixture(scope="module")
def finished_run(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One short run to its end (a checkpoint at its last step), shared by the tests that start from a finished run;
    each works on its own copy."""
    base = tmp_path_factory.mktemp("finished")
    data = counting_text(base / "data.jsonl", records=64)
    plan = write_plan(make_plan(tiny_model, data, base / "run", max_steps=2, checkpoint_every=2), base / "p.json")
    assert train(plan, progress_interval_s=0).succeeded
    return base


def _copy_of(finished: Path, tmp_path: Path) -> Path:
    shutil.copytree(finished, tmp_path / "copy")
    return tmp_path / "copy"


def test_running_a_finished_plan_again_changes_nothing(finished_run: Path, tmp_path: Path) -> None:
    base = _copy_of(finished_run, tmp_path)
    summary = (base / "run" / "summary.json").read_text()
    adapter = (base / "run" / "final" / "adapter_model.safetensors").stat().st_mtime_ns

    again = train(base / "p.json", str(base / "run"), progress_interval_s=0)
    assert again.succeeded and "already complete at step 2" in again.last_event.message
    assert (base / "run" / "summary.json").read_text() == summary
    assert (base / "run" / "final" / "adapter_model.safetensors").stat().st_mtime_ns == adapter


def test_a_tampered_checkpoint_is_refused_not_loaded(tiny_model: Path, finished_run: Path, tmp_path: Path) -> None:
    """Issue 9, item 10: DeepSpeed unpickles checkpoint files; only what the run signed may reach it."""
    base = _copy_of(finished_run, tmp_path)
    out = base / "run"
    found = checkpoint.latest(out / "checkpoints")
    assert found is not None
    states = next(found[1].rglob("*model_states.pt"))
    data = bytearray(states.read_bytes())
    data[-1] ^= 0xFF  # same size: the listing still counts it complete
    states.write_bytes(bytes(data))
    longer = write_plan(make_plan(tiny_model, base / "data.jsonl", out, max_steps=4, checkpoint_every=2),
                        tmp_path / "p4.json")
    again = train(longer, str(out), progress_interval_s=0)
    assert not again.succeeded
    assert again.last_event.phase == progress_pb2.PHASE_FAILED
    assert "was not loaded" in again.last_event.message and "does not match the hash" in again.last_event.message
    assert "resumed from" not in (out / "logs" / "train.log").read_text()
    assert [s for s, _ in checkpoint.complete_checkpoints(out / "checkpoints")] == [2]  # kept, not overwritten


@pytest.mark.parametrize("content", [b"\x00\x01\xffnot a plan", b'{"planId": ' + b"[" * 10_000,
                                     b'{"planId": "p", "workload": {"epochs": "NaN"}}'])
def test_cli_check_refuses_broken_plan_files_with_exit_2_and_no_traceback(tmp_path: Path, content: bytes) -> None:
    """Issue 9, item 8: these died with DecodeError / RecursionError tracebacks (exit 1)."""
    plan = tmp_path / "plan.json"
    plan.write_bytes(content)
    proc = subprocess.run([sys.executable, "-m", "launch", "train", "--check", str(plan)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("tunefleet train: ") and "Traceback" not in proc.stderr
