"""Other trainers' steps under fake tensors, run by the library itself: benchmarks/simulate.py sizes a plan whose
training.recipe is not tunefleet with these.

hf-trainer — transformers' Trainer + PEFT without DeepSpeed, on one GPU, as a user's script (and LLaMA-Factory,
ms-swift or Axolotl underneath) runs it:
- the model loaded in bf16 (QLoRA: quantised as from_pretrained(quantization_config=...) quantises it, then PEFT's
  prepare_model_for_kbit_training with its defaults: every non-4-bit parameter cast to fp32, gradient checkpointing
  as the plan says), LoRA adapters from get_peft_model (PEFT keeps them in fp32 on a bf16 or 4-bit base);
- TrainingArguments(bf16=True) — automatic mixed precision: accelerate runs the forward under bf16 autocast and
  converts its outputs to fp32 (accelerate.utils.operations.convert_outputs_to_fp32) — optim "adamw_torch",
  max_grad_norm 1.0, the plan's micro-batch and gradient checkpointing (use_reentrant as transformers defaults it);
- `Trainer.train()` itself for the steps asked; a callback and compute_loss's return mark each step's phases
  (forward, backward, step) for the counter.

What differs from CUDA, set to CUDA's way: torch.optim.AdamW picks its foreach implementation for CUDA tensors and
the per-parameter loop for CPU ones (torch.optim.optimizer._default_to_fused_or_foreach); the foreach step keeps
temporaries as large as the gradients, so the simulation asks for foreach (`_foreach_as_on_cuda`). Autocast runs
the CPU's policy: for the RMSNorm decoders simulated here the two agree op for op (the ops CUDA alone keeps in
fp32 — pow, rsqrt, softmax, log_softmax, sum — see fp32 inputs already: transformers upcasts before each), but a
LayerNorm model would not (CUDA runs layer_norm in fp32 under autocast, the CPU in bf16), so hf-trainer rows are
RMSNorm families only.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from typing import Any

import torch

from contract.schema import Method, TrainingSpec
from executor.training.live_bytes import LiveBytes, Peak


@contextlib.contextmanager
def _foreach_as_on_cuda() -> Iterator[None]:
    from torch.optim import optimizer

    original = optimizer._default_to_fused_or_foreach
    optimizer._default_to_fused_or_foreach = lambda params, differentiable, use_fused=False: (False, True)
    try:
        yield
    finally:
        optimizer._default_to_fused_or_foreach = original


def hf_trainer_model(model: Any, t: TrainingSpec, quantized: bool) -> Any:
    """The user's script between loading and the Trainer: k-bit preparation (QLoRA), checkpointing, the adapters."""
    from peft import get_peft_model, prepare_model_for_kbit_training

    from executor.training.peft_config import lora_config

    if t.method not in (Method.LORA, Method.QLORA):
        raise ValueError(f"hf-trainer is simulated for lora and qlora, not {t.method.value}")
    if quantized:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=t.gradient_checkpointing)
    return get_peft_model(model, lora_config(t.lora, model))


def loaded(counter: LiveBytes) -> None:
    """The model is ready and the first step begins: the caching allocator gives back what loading left cached.
    The simulation builds the model from its config and converts (and quantises) it on the device, which leaves
    segments a real from_pretrained, loading each weight in its final dtype, would not; so the reserved peak is
    the steps' own, from the weights and what they keep."""
    if counter.allocator is not None:
        counter.allocator.empty_cache()


def hf_trainer_peaks(model: Any, t: TrainingSpec, vocab_size: int, counter: LiveBytes, steps: int) -> list[Peak]:
    """`steps` steps of Trainer.train() on full micro-batches (every sequence at the plan's length); each step's
    peak."""
    import transformers

    peaks: list[Peak] = []

    class _Steps(transformers.TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if not peaks:
                loaded(counter)
            counter.peak = Peak(counter.live_bytes)
            counter.set_phase("forward")

        def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            counter.set_phase("step")

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            peaks.append(counter.peak)
            counter.set_phase("init")

    class _Trainer(transformers.Trainer):
        def compute_loss(self, *args: Any, **kwargs: Any) -> Any:
            loss = super().compute_loss(*args, **kwargs)
            counter.set_phase("backward")
            return loss

    n = t.sequence_length
    examples = [{"input_ids": torch.randint(0, vocab_size, (n,)), "attention_mask": torch.ones(n, dtype=torch.long),
                 "labels": torch.randint(0, vocab_size, (n,))} for _ in range(steps * t.micro_batch_size)]
    with tempfile.TemporaryDirectory() as out, _foreach_as_on_cuda():
        args = transformers.TrainingArguments(
            output_dir=out, bf16=True, optim="adamw_torch", per_device_train_batch_size=t.micro_batch_size,
            gradient_accumulation_steps=t.gradient_accumulation_steps, max_steps=steps,
            gradient_checkpointing=t.gradient_checkpointing,
            report_to=[], save_strategy="no", logging_steps=1, use_cpu=True, dataloader_num_workers=0,
            disable_tqdm=True)
        _Trainer(model=model, args=args, train_dataset=examples, callbacks=[_Steps()]).train()
    return peaks
