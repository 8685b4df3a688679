"""Other trainers' steps under fake tensors, run by the library itself: benchmarks/simulate.py sizes a plan whose
training.recipe is not tunefleet with these.

hf-trainer — transformers' Trainer + PEFT without DeepSpeed, on one GPU, as a user's script (and LLaMA-Factory,
ms-swift or Axolotl underneath) runs it (under DeepSpeed: below):
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
temporaries as large as the gradients, so the simulation asks for foreach (`foreach_as_on_cuda`). Autocast runs
the CPU's policy: for the RMSNorm decoders simulated here the two agree op for op (the ops CUDA alone keeps in
fp32 — pow, rsqrt, softmax, log_softmax, sum — see fp32 inputs already: transformers upcasts before each), but a
LayerNorm model would not (CUDA runs layer_norm in fp32 under autocast, the CPU in bf16), so hf-trainer rows are
RMSNorm families only. A full fine-tune trains the bf16 model's own weights (no PEFT).

trl-sft — TRL's SFTTrainer with SFTConfig's defaults and the plan's LoRA as its peft_config (none for a full
fine-tune), on tokenised sequences through TRL's own collator and fused LM head (`trl_sft_peaks`). What differs from
CUDA, set to CUDA's way: the fused head's Triton folds and in-place fp32 accumulation (`_fused_head_as_on_cuda`).

Sharded by FSDP (training.sharding fsdp, hf-trainer) the Trainer gets PEFT's FSDP config (planner.trainer_fsdp) and
runs on the fake process group: accelerate's own FSDP preparation wraps the model (`_fsdp_on_cpu` lets accelerate
take the plugin up on the CPU's ranks), and a QLoRA model is not k-bit prepared (`hf_trainer_model`).

Under ZeRO 2-3 either trainer gets LLaMA-Factory's DeepSpeed config (planner.trainer_deepspeed) in its arguments
(`trainer_arguments`), made before the model so that ZeRO-3 partitions it as it loads, and runs on the fake process
group of the plan's ranks: accelerate builds the DeepSpeed engine around the Trainer's optimizer and steps it inside
backward (`_deepspeed_step_marked`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.liger import liger_as_on_cuda
from contract.schema import Method, Recipe, Sharding, TrainingSpec
from executor.training.live_bytes import LiveBytes, ModuleStack, Peak


@contextlib.contextmanager
def foreach_as_on_cuda() -> Iterator[None]:
    """torch's Adam and AdamW choose foreach as on CUDA tensors. torch.optim.adam binds the chooser by name at import,
    so it is replaced there as well as where it is defined."""
    from torch.optim import adam, optimizer

    original = optimizer._default_to_fused_or_foreach

    def foreach(params: Any, differentiable: bool, use_fused: bool = False) -> tuple[bool, bool]:
        return False, True

    optimizer._default_to_fused_or_foreach = adam._default_to_fused_or_foreach = foreach
    try:
        yield
    finally:
        optimizer._default_to_fused_or_foreach = adam._default_to_fused_or_foreach = original


@contextlib.contextmanager
def _deepspeed_step_marked(counter: LiveBytes) -> Iterator[None]:
    """Under DeepSpeed, accelerate steps the engine inside the Trainer's backward (DeepSpeedEngineWrapper.backward:
    engine.step), before the Trainer's optimizer callbacks run: the engine's step marks the step phase itself."""
    from deepspeed.runtime.engine import DeepSpeedEngine

    original = DeepSpeedEngine._take_model_step

    def marked(engine: Any, *args: Any, **kwargs: Any) -> Any:
        counter.set_phase("step")
        return original(engine, *args, **kwargs)

    DeepSpeedEngine._take_model_step = marked
    try:
        yield
    finally:
        DeepSpeedEngine._take_model_step = original


@contextlib.contextmanager
def _fsdp_on_cpu() -> Iterator[None]:
    """accelerate runs FSDP on accelerator devices only: on the CPU's ranks it settles on MULTI_CPU (DDP) and leaves
    the Trainer's FSDP plugin unused (accelerate.state.AcceleratorState). PyTorch's FSDP itself runs on the CPU and
    the fake process group; as the state is made, the plugin is taken up as on a GPU rank (distributed type FSDP, its
    mixed precision set from the Trainer's), so accelerate's own FSDP preparation wraps the model."""
    from accelerate import state
    from accelerate.utils import DistributedType

    original = state.AcceleratorState.__init__

    def as_on_gpu(self: Any, *args: Any, fsdp_plugin: Any = None, **kwargs: Any) -> None:
        original(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type is DistributedType.MULTI_CPU:
            self.distributed_type = state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP
            if self._mixed_precision != "no":
                fsdp_plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = fsdp_plugin

    state.AcceleratorState.__init__ = as_on_gpu
    try:
        yield
    finally:
        state.AcceleratorState.__init__ = original


def hf_trainer_model(model: Any, t: TrainingSpec, quantized: bool) -> Any:
    """The user's script between loading and the Trainer: k-bit preparation (QLoRA), checkpointing, the adapters."""
    from peft import get_peft_model, prepare_model_for_kbit_training

    from executor.training.peft_config import lora_config

    if t.method is Method.FULL:
        return model  # the model's own bf16 weights train
    if t.method not in (Method.LORA, Method.QLORA):
        raise ValueError(f"hf-trainer is simulated for lora, qlora and full, not {t.method.value}")
    if quantized and t.sharding is not Sharding.FSDP:
        # sharded QLoRA is not k-bit prepared: its fp32 casts would break FSDP's one-dtype flat parameters (TRL's
        # SFTTrainer skips it for a sharded model: trl/models/utils.py is_sharded_qlora; PEFT's FSDP-QLoRA guide)
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=t.gradient_checkpointing)
    return get_peft_model(model, lora_config(t.lora, model))


def loaded(counter: LiveBytes) -> None:
    """The model is ready and the first step begins: the counter keeps loading's peak (`LiveBytes.steps_begin`), and
    the caching allocator gives back what loading left cached. The simulation builds the model from its config and
    converts (and quantises) it on the device, which leaves segments a real from_pretrained, loading each weight in
    its final dtype, would not; so the reserved peak is the steps' own, from the weights and what they keep."""
    counter.steps_begin()
    if counter.allocator is not None:
        counter.allocator.empty_cache()


def step_callback(counter: LiveBytes, peaks: list[Peak]) -> Any:
    """A Trainer callback marking each step's phases for the counter and keeping its peak."""
    import transformers

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

    return _Steps()


def marking_backward(trainer_class: Any, counter: LiveBytes) -> Any:
    """`trainer_class` whose compute_loss marks where the forward ends and backward begins."""

    class _Trainer(trainer_class):  # type: ignore[misc, valid-type]
        def compute_loss(self, *args: Any, **kwargs: Any) -> Any:
            loss = super().compute_loss(*args, **kwargs)
            counter.set_phase("backward")
            return loss

    return _Trainer


# What both trainers are given besides the plan's batch and checkpointing: no saving, logging or progress bars
_QUIET = dict(report_to=[], save_strategy="no", logging_steps=1, dataloader_num_workers=0, disable_tqdm=True)


@contextlib.contextmanager
def trainer_arguments(t: TrainingSpec, world_size: int, device: str = "cpu") -> Iterator[Any]:
    """The arguments a user's script builds for the recipe's trainer, entered before the model is made:
    TrainingArguments for hf-trainer (optim adamw_torch), SFTConfig and DPOConfig with their defaults for trl-sft and
    trl-dpo, for `device` (the simulation's CPU, or measure_gpu's CUDA). Under ZeRO they carry the Trainer's DeepSpeed
    config (planner.trainer_deepspeed), which also tells ZeRO-3's loading to partition the weights as they are made
    (transformers' HfDeepSpeedConfig). With DeepSpeed the ranks are the fake process group's: the launcher's
    environment says how many (accelerate reads LOCAL_WORLD_SIZE, DeepSpeed the master's address, which no fake
    collective dials) and which device. Transformers' DeepSpeed, accelerate's state and the environment are restored
    as the run ends."""
    import transformers
    from accelerate.state import AcceleratorState
    from transformers.integrations.deepspeed import unset_hf_deepspeed_config

    from planner.trainer_deepspeed import trainer_deepspeed_config
    from planner.trainer_fsdp import trainer_fsdp_config

    fsdp = t.sharding is Sharding.FSDP
    deepspeed = trainer_deepspeed_config(t.zero_stage) if t.zero_stage and not fsdp else None
    # a fake tensor's device is compared as written, and accelerate names a rank's CPU "cpu:0" unless told the
    # device: the model's tensors say "cpu", so every batch moved to "cpu:0" would be copied where a real one is not
    launcher = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "LOCAL_WORLD_SIZE": str(world_size),
                **({"ACCELERATE_TORCH_DEVICE": "cpu"} if device == "cpu" else {})} if t.zero_stage else {}
    outer = dict(os.environ)  # transformers also sets ACCELERATE_USE_DEEPSPEED, which must not outlive the run
    os.environ.update(launcher)
    try:
        with tempfile.TemporaryDirectory() as out, _fsdp_on_cpu() if fsdp else contextlib.nullcontext():
            common = dict(output_dir=out, per_device_train_batch_size=t.micro_batch_size,
                          gradient_accumulation_steps=t.gradient_accumulation_steps,
                          gradient_checkpointing=t.gradient_checkpointing, deepspeed=deepspeed,
                          use_cpu=device == "cpu", use_liger_kernel=t.liger, **_QUIET)
            if fsdp:
                common.update(fsdp=True, fsdp_config=trainer_fsdp_config())
            if t.recipe in (Recipe.TRL_SFT, Recipe.TRL_DPO):
                from trl import DPOConfig, SFTConfig  # TRL's recipes alone need TRL (and the datasets it imports)
            if t.recipe is Recipe.TRL_SFT:
                yield SFTConfig(max_length=t.sequence_length, **common)
            elif t.recipe is Recipe.TRL_DPO:
                yield DPOConfig(max_length=t.sequence_length, precompute_ref_log_probs=t.dpo.precompute_reference,
                                **common)
            else:
                yield transformers.TrainingArguments(bf16=True, optim="adamw_torch", **common)
    finally:
        unset_hf_deepspeed_config()
        AcceleratorState._reset_state(reset_partial_state=True)
        os.environ.clear()
        os.environ.update(outer)


def _liger(t: TrainingSpec) -> contextlib.AbstractContextManager[None]:
    """Liger's kernels as on CUDA where the plan uses them (benchmarks/liger.py)."""
    return liger_as_on_cuda() if t.liger else contextlib.nullcontext()


def full_sequences(vocab_size: int, sequence_length: int, count: int) -> list[dict[str, torch.Tensor]]:
    """`count` Trainer examples of random tokens, every one at the full sequence length."""
    return [{"input_ids": torch.randint(0, vocab_size, (sequence_length,)),
             "attention_mask": torch.ones(sequence_length, dtype=torch.long),
             "labels": torch.randint(0, vocab_size, (sequence_length,))} for _ in range(count)]


def hf_trainer_peaks(model: Any, args: Any, t: TrainingSpec, vocab_size: int, counter: LiveBytes,
                     steps: int) -> list[Peak]:
    """`steps` steps of Trainer.train() with `args` (`trainer_arguments`) on full micro-batches (every sequence at
    the plan's length); each step's peak."""
    import transformers

    peaks: list[Peak] = []
    examples = full_sequences(vocab_size, t.sequence_length, steps * t.micro_batch_size)
    args.max_steps = steps
    with foreach_as_on_cuda(), _deepspeed_step_marked(counter), _liger(t):
        marking_backward(transformers.Trainer, counter)(
            model=model, args=args, train_dataset=examples, callbacks=[step_callback(counter, peaks)]).train()
    return peaks


class _EveryLabelCounts(TorchDispatchMode):
    """Under fake tensors a boolean mask's count cannot be read, so indexing by one has no shape. The simulated
    batch is unpadded by construction and every label counts, so a mask selects every position: TRL's fused head
    gathers the labelled positions (`hidden_states[mask]`) into a copy of them all."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch._subclasses.fake_tensor import FakeTensor

        if func is torch.ops.aten.index.Tensor:
            source, indices = args
            if len(indices) == 1 and isinstance(indices[0], FakeTensor) and indices[0].dtype is torch.bool:
                mask = indices[0]
                return source.new_empty((mask.numel(), *source.shape[mask.dim():]))
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def _fused_head_as_on_cuda() -> Iterator[None]:
    """TRL's fused LM head (trl/kernels/chunked_logprob.py) as it runs on CUDA, where Triton is:
    - only the labelled positions are scored: the head gathers them (`compact`, utils._use_triton);
    - Triton kernels fold each logits tile into per-token statistics (forward) and turn it into its own gradient in
      place (backward), and cuBLAS accumulates the gradient GEMMs into fp32 in place (`torch.addmm(out_dtype=
      float32, out=acc)`): nothing is allocated beyond the one tile buffer and the per-token vectors.
    On the CPU the same folds are torch ops whose fp32 temporaries are as large as a tile, and the accumulation
    upcasts both factors; the stand-ins allocate nothing and compute nothing (the simulation counts bytes)."""
    from trl.kernels import chunked_logprob
    from trl.trainer import utils

    saved = (utils._use_triton, chunked_logprob._forward_tile, chunked_logprob._backward_tile,
             chunked_logprob._addmm_fp32)

    def in_place(*args: Any, **kwargs: Any) -> None:
        return None

    utils._use_triton = lambda device: True
    chunked_logprob._forward_tile = chunked_logprob._backward_tile = chunked_logprob._addmm_fp32 = in_place
    try:
        with _EveryLabelCounts():
            yield
    finally:
        (utils._use_triton, chunked_logprob._forward_tile, chunked_logprob._backward_tile,
         chunked_logprob._addmm_fp32) = saved


def _word_tokenizer() -> Any:
    """TRL's processing class: a word-level tokenizer built locally (nothing is downloaded) that splits on spaces and
    knows one word, "a", beside padding and end of sequence. SFTTrainer's batches come tokenised, so it only names the
    padding token; DPOTrainer tokenises its text, one token a word."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    backend = Tokenizer(models.WordLevel({"<pad>": 0, "<unk>": 1, "</s>": 2, "a": 3}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", pad_token="<pad>",
                                                eos_token="</s>")


def trl_sft_peaks(model: Any, args: Any, t: TrainingSpec, vocab_size: int, counter: LiveBytes, steps: int,
                  modules: ModuleStack) -> list[Peak]:
    """`steps` steps of TRL's SFTTrainer.train() with `args` (`trainer_arguments`: SFTConfig's defaults, bf16
    autocast, the fused LM head, transformers' default optimizer, adamw_torch_fused) and the plan's LoRA as its
    peft_config (none for a full fine-tune), on full micro-batches of tokenised sequences at the plan's length (labels
    are the inputs); each step's peak. `modules` names the modules of the model the trainer wraps."""
    import datasets
    from trl import SFTTrainer

    examples = datasets.Dataset.from_dict({"input_ids": [[(r + i) % vocab_size for i in range(t.sequence_length)]
                                                         for r in range(steps * t.micro_batch_size)]})
    return _trl_peaks(SFTTrainer, dict(model=model, args=args, train_dataset=examples), t, counter, steps, modules)


def _trl_peaks(trainer_class: Any, given: dict[str, Any], t: TrainingSpec, counter: LiveBytes, steps: int,
               modules: ModuleStack) -> list[Peak]:
    """`steps` steps of a TRL trainer built with `given` (model, arguments, dataset), the word tokenizer and the plan's
    LoRA as its peft_config (none for a full fine-tune), its fused head as on CUDA; each step's peak."""
    from executor.training.peft_config import lora_config

    if t.method not in (Method.LORA, Method.QLORA, Method.FULL):
        raise ValueError(f"{t.recipe.value} is simulated for lora, qlora and full, not {t.method.value}")
    peaks: list[Peak] = []
    given["args"].max_steps = steps
    with _fused_head_as_on_cuda(), _deepspeed_step_marked(counter), _liger(t):
        trainer = marking_backward(trainer_class, counter)(
            **given, processing_class=_word_tokenizer(), callbacks=[step_callback(counter, peaks)],
            peft_config=None if t.method is Method.FULL else lora_config(t.lora, given["model"]))
        modules.name(trainer.model)
        trainer.train()
    return peaks


@contextlib.contextmanager
def _reference_log_probs_given() -> Iterator[None]:
    """With precompute_ref_log_probs DPOTrainer scores the dataset with the reference before training and stores the
    log-probs with it: a NumPy column (which a fake tensor cannot give) in a cache file keyed by the model's hash. The
    steps' bytes do not depend on the values, and the pass ends before the first step: the stand-in adds the two
    columns as zeros, and names the model for the cache it does not use (hash_module reads every weight's values)."""
    from trl.trainer import dpo_trainer
    from trl.trainer.dpo_trainer import DPOTrainer

    original, hash_module = DPOTrainer._precompute_ref_logps, dpo_trainer.hash_module

    def given(trainer: Any, dataset: Any, name: str, batch_size: int) -> Any:
        zeros = [0.0] * len(dataset)
        return dataset.add_column("ref_chosen_logps", zeros).add_column("ref_rejected_logps", zeros)

    DPOTrainer._precompute_ref_logps, dpo_trainer.hash_module = given, lambda module: "simulated"
    try:
        yield
    finally:
        DPOTrainer._precompute_ref_logps, dpo_trainer.hash_module = original, hash_module


def trl_dpo_peaks(model: Any, reference: Any, args: Any, t: TrainingSpec, counter: LiveBytes, steps: int,
                  modules: ModuleStack) -> list[Peak]:
    """`steps` steps of TRL's DPOTrainer.train() with `args` (`trainer_arguments`: DPOConfig's defaults, bf16
    autocast, the fused LM head for policy and reference, dropout off, adamw_torch_fused) and the plan's LoRA as its
    peft_config (the reference the base with the adapter off; a full fine-tune's, `reference`, the model loaded again
    as a script passes it to DPOTrainer, which would otherwise load it from the model's hub id), on
    preference pairs whose chosen and rejected completions fill the plan's length after an empty prompt: every
    position but the last is scored, the most a pair of that length can cost; each step's peak."""
    import datasets
    from trl import DPOTrainer

    completion = " ".join(["a"] * (t.sequence_length - 1) + ["</s>"])
    pairs = steps * t.micro_batch_size
    examples = datasets.Dataset.from_dict({"prompt": [""] * pairs, "chosen": [completion] * pairs,
                                           "rejected": [completion] * pairs})
    with _reference_log_probs_given():
        return _trl_peaks(DPOTrainer, dict(model=model, ref_model=reference, args=args, train_dataset=examples), t,
                          counter, steps, modules)
