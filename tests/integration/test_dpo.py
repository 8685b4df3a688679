"""DPO on the CPU: real DeepSpeed + PEFT + TRL's collation on a tiny Llama built from a config."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from peft import PeftModel
from tunefleet.v1 import progress_pb2, training_pb2

from contract.errors import PlanError
from contract.progress import read_events
from devtools.tiny import make_plan, preference_pairs, write_plan
from executor.training.launcher import check_plan, train
from tests.integration.training_helpers import logits, wait_for_phase

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
LORA, FULL = training_pb2.METHOD_LORA, training_pb2.METHOD_FULL
_STEPS = 24


@pytest.fixture()
def pairs(tmp_path: Path) -> Path:
    return preference_pairs(tmp_path / "pairs.jsonl", records=64)


def _dpo_plan(model: Path, data: Path, out: Path, *, method: int, zero_stage: int, ranks: int,
              precompute: bool = False, separate: bool = False, steps: int = _STEPS, every: int = 0,
              sft_weight: float = 0.0) -> Path:
    plan = make_plan(model, data, out, method=method, zero_stage=zero_stage, ranks=ranks, max_steps=steps,
                     micro_batch=4 // ranks, checkpoint_every=every, plan_id=out.name,
                     learning_rate=3e-2 if method == LORA else 2e-3, dpo_reference_model=separate,
                     dpo=training_pb2.DpoSpec(beta=0.5, precompute_reference=precompute, sft_weight=sft_weight))
    return write_plan(plan, out.parent / f"{out.name}.json")


def _training_events(out: Path) -> list[progress_pb2.ProgressEvent]:
    return [e for e in read_events(out / "progress.jsonl") if e.phase == progress_pb2.PHASE_TRAINING and e.loss]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


# Each reference (LoRA's adapter-off pass, a full fine-tune's frozen copy) under the ZeRO stage the other does not
# learn under here, on two ranks; the precomputed-reference test below trains live DPO under the other two pairings
@pytest.mark.parametrize(("method", "zero_stage", "ranks", "separate"), [
    (LORA, 3, 2, False), (FULL, 2, 2, True),
], ids=["lora-adapter-off-zero3-2ranks", "full-copy-zero2-2ranks"])
def test_dpo_starts_at_ln2_and_learns_the_preference(tiny_model: Path, pairs: Path, tmp_path: Path, method: int,
                                                     zero_stage: int, ranks: int, separate: bool) -> None:
    out = tmp_path / "run"
    result = train(_dpo_plan(tiny_model, pairs, out, method=method, zero_stage=zero_stage, ranks=ranks,
                             separate=separate), progress_interval_s=0)

    assert result.succeeded, result.last_event.message
    events = _training_events(out)
    assert len(events) == _STEPS
    # policy == reference at step 1: every pair's logit is 0, so the sigmoid loss is ln 2
    assert events[0].loss == pytest.approx(math.log(2), abs=1e-5)
    assert events[0].metrics["rewards/margin"] == pytest.approx(0.0, abs=1e-5)
    losses = [e.loss for e in events]
    accuracy = [e.metrics["rewards/accuracy"] for e in events]
    assert _mean(losses[-4:]) < 0.9 * _mean(losses[:4]), losses
    assert _mean(accuracy[-4:]) > _mean(accuracy[:4]) and _mean(accuracy[-4:]) >= 0.75, accuracy
    assert events[-1].metrics["rewards/margin"] > 0
    assert set(events[-1].metrics) == {"rewards/accuracy", "rewards/margin", "rewards/chosen", "rewards/rejected",
                                       "logps/chosen", "logps/rejected"}
    final = out / "final"
    exported = (PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(tiny_model), final)
                if method == LORA else transformers.AutoModelForCausalLM.from_pretrained(final))
    ids = torch.tensor([[2, 8, 9, 10, 11]])
    assert not torch.allclose(logits(exported, ids),
                              logits(transformers.AutoModelForCausalLM.from_pretrained(tiny_model), ids), atol=1e-4)


@pytest.mark.parametrize(("method", "zero_stage", "ranks"), [(FULL, 3, 2), (LORA, 2, 1)],
                         ids=["full-zero3-2ranks", "lora-zero2-1rank"])
def test_precomputed_reference_log_probs_give_the_live_reference_loss(tiny_model: Path, pairs: Path, tmp_path: Path,
                                                                      method: int, zero_stage: int,
                                                                      ranks: int) -> None:
    live, stored = tmp_path / "live", tmp_path / "stored"
    kwargs = {"method": method, "zero_stage": zero_stage, "ranks": ranks, "steps": 8, "sft_weight": 0.5}
    assert train(_dpo_plan(tiny_model, pairs, live, separate=method == FULL, **kwargs),  # type: ignore[arg-type]
                 progress_interval_s=0).succeeded
    result = train(_dpo_plan(tiny_model, pairs, stored, precompute=True, **kwargs),  # type: ignore[arg-type]
                   progress_interval_s=0)
    assert result.succeeded, result.last_event.message

    reference = torch.load(stored / "data" / "reference_logps.pt", weights_only=True)
    assert reference.shape == (64, 2) and bool(torch.all(reference < 0))
    assert any("reference log-probs of 64 pairs" in e.message for e in read_events(stored / "progress.jsonl"))
    live_losses = [e.loss for e in _training_events(live)]
    stored_losses = [e.loss for e in _training_events(stored)]
    assert len(stored_losses) == 8
    assert stored_losses == pytest.approx(live_losses, rel=1e-4)
    assert stored_losses[0] > math.log(2)  # the SFT term adds the chosen responses' NLL to ln 2


def test_sigkill_mid_dpo_resumes_to_the_same_end(tiny_model: Path, pairs: Path, tmp_path: Path) -> None:
    killed, straight = tmp_path / "killed", tmp_path / "straight"
    plan = _dpo_plan(tiny_model, pairs, killed, method=LORA, zero_stage=2, ranks=2, steps=40, every=10,
                     precompute=True)
    proc = subprocess.Popen([sys.executable, "-m", "executor.training", str(plan), "--progress-interval-s", "0"],
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        first = wait_for_phase(killed / "progress.jsonl", progress_pb2.PHASE_CHECKPOINTING, proc)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert first.step == 10
    assert read_events(killed / "progress.jsonl")[-1].phase != progress_pb2.PHASE_DONE
    stored = torch.load(killed / "data" / "reference_logps.pt", weights_only=True)

    resumed = train(plan, progress_interval_s=0)
    assert resumed.succeeded, resumed.last_event.message
    assert torch.equal(torch.load(killed / "data" / "reference_logps.pt", weights_only=True), stored)
    resume = next(e for e in read_events(killed / "progress.jsonl") if e.phase == progress_pb2.PHASE_LOADING and e.step)
    assert resume.step % 10 == 0 and resume.step >= 10

    assert train(_dpo_plan(tiny_model, pairs, straight, method=LORA, zero_stage=2, ranks=2, steps=40, every=10,
                           precompute=True), progress_interval_s=0).succeeded
    ids = torch.tensor([[2, 8, 9, 10, 11]])
    models = [PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(tiny_model), d / "final")
              for d in (killed, straight)]
    torch.testing.assert_close(logits(models[0], ids), logits(models[1], ids), rtol=1e-5, atol=1e-5)


def test_a_pair_missing_rejected_is_refused_naming_the_record(tiny_model: Path, tmp_path: Path) -> None:
    data = preference_pairs(tmp_path / "pairs.jsonl", records=8)
    lines = data.read_text().splitlines()
    lines[4] = '{"prompt": "w1 w2", "chosen": " w3 w4"}'
    data.write_text("\n".join(lines) + "\n")
    with pytest.raises(PlanError) as e:
        check_plan(_dpo_plan(tiny_model, data, tmp_path / "run", method=LORA, zero_stage=2, ranks=1))
    assert e.value.field == "dataset.format" and "record 5" in str(e.value) and "'rejected'" in str(e.value)
    assert not (tmp_path / "run").exists()
