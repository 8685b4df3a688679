"""Fit: does a configuration fit, the largest micro-batch that does, and what to change if not."""

from __future__ import annotations

from dataclasses import dataclass, replace

from common.units import gib
from contract.errors import InvalidFieldError
from contract.model import Architecture, ModelSpec
from contract.schema import ALL_LINEAR, Hardware, Loss, Method, Objective, Offload, Precision, Recipe, TrainingSpec
from planner import calibration, recipes
from planner.architecture import linear_layers
from planner.catalog import Catalog
from planner.confidence import Band, band
from planner.errors import UnsupportedError
from planner.memo import memo
from planner.memory import MEMORY_CACHE_ENTRIES, HostBreakdown, MemoryBreakdown, gpu_memory, host_memory, per_gpu_memory
from planner.parameters import parameter_split

# The largest byte count a uint64 field carries on every client (int64's maximum: Java and JSON readers).
MAX_REPORTABLE_BYTES = 2 ** 63 - 1
MAX_MICRO_BATCH = 4096
MAX_MARGIN_FRACTION = 1.0
MIN_SUGGESTED_SEQUENCE = 256  # shorter sequences are not suggested: most examples would be cut


@dataclass(frozen=True)
class Suggestion:
    change: str
    reason: str
    per_gpu_total_bytes: int
    fits: bool
    training: TrainingSpec
    hardware: Hardware


@dataclass(frozen=True)
class FitResult:
    fits: bool
    per_gpu: MemoryBreakdown
    host: HostBreakdown
    capacity_bytes: int
    max_micro_batch: int
    trainable_parameters: int
    suggestions: tuple[Suggestion, ...]
    notes: tuple[str, ...]
    model: ModelSpec
    training: TrainingSpec
    hardware: Hardware
    band: Band
    margin_fraction: float = 0.0
    inference: bool = False  # sized for serving (planner/inference.py)
    fit_probability: float | None = None  # from the fleet's own runs of this class (planner.calibration)

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.per_gpu.total_bytes

    @property
    def tight(self) -> bool:
        """It fits as predicted, but the likely range reaches past the GPU's memory."""
        return self.fits and self.band.high_bytes > self.capacity_bytes



def _fits(model: ModelSpec, t: TrainingSpec, hw: Hardware) -> tuple[bool, MemoryBreakdown, HostBreakdown]:
    gpu = per_gpu_memory(model, t, hw)
    host = host_memory(model, t, hw)
    return gpu.total_bytes <= hw.gpu.memory_bytes and host.fits, gpu, host


def max_micro_batch(model: ModelSpec, t: TrainingSpec, hw: Hardware) -> int:
    """Largest micro-batch whose per-GPU peak fits."""
    return _max_micro_batch(model.architecture, t, hw.world_size, hw.gpu.memory_bytes)


@memo(MEMORY_CACHE_ENTRIES)
def _max_micro_batch(a: Architecture, t: TrainingSpec, n: int, capacity_bytes: int) -> int:
    """The peak grows with the micro-batch and is convex in it (the larger of terms affine in it), so the line
    through micro-batches 1 and 2 bounds the answer from above; a bisection below that bound finds it."""
    def peak(mb: int) -> int:
        return gpu_memory(a, replace(t, micro_batch_size=mb), n).total_bytes

    one = peak(1)
    if one > capacity_bytes:
        return 0
    slope = max(peak(2) - one, 1)
    fits, too_big = 1, min(MAX_MICRO_BATCH, 1 + (capacity_bytes - one) // slope) + 1
    while too_big - fits > 1:  # peak(fits) fits; too_big is above the bound or does not
        mid = (fits + too_big) // 2
        fits, too_big = (mid, too_big) if peak(mid) <= capacity_bytes else (fits, mid)
    return int(fits)


def _variants(model: ModelSpec, t: TrainingSpec, hw: Hardware, catalog: Catalog,
              best_mb: int) -> list[tuple[str, str, TrainingSpec, Hardware]]:
    out: list[tuple[str, str, TrainingSpec, Hardware]] = []
    if 0 < best_mb < t.micro_batch_size:
        accum = t.gradient_accumulation_steps * -(-t.micro_batch_size // best_mb)
        out.append((f"micro-batch {best_mb} with gradient accumulation {accum}",
                    "keeps the effective batch while fewer activations are alive at once",
                    replace(t, micro_batch_size=best_mb, gradient_accumulation_steps=accum), hw))
    if not t.gradient_checkpointing:
        out.append(("enable gradient checkpointing", "keeps one activation per layer and recomputes the rest "
                    "(about 30 % more compute)", replace(t, gradient_checkpointing=True), hw))
    sft = replace(t, recipe=Recipe.TRL_SFT)
    if t.loss is Loss.STANDARD and t.recipe is not Recipe.TRL_SFT and recipes.covers(model.architecture, sft,
                                                                                        hw.world_size):
        out.append(("--recipe trl-sft", "TRL's SFTTrainer scores the vocabulary through its fused LM head in tiles "
                    "and never builds the logits (planned; tunefleet's executor does not run it)", sft, hw))
    elif t.loss is Loss.STANDARD and t.recipe not in (Recipe.TUNEFLEET, Recipe.TORCHTUNE):
        out.append(("use a chunked cross-entropy loss", "never materialises the full fp32 logits",
                    replace(t, loss=Loss.CHUNKED), hw))
    if t.recipe is Recipe.HF_TRAINER and not t.liger and \
            recipes.covers(model.architecture, patched := replace(t, liger=True), hw.world_size):
        out.append(("--liger", "Liger's fused linear cross-entropy never builds the logits, and its RMSNorm and "
                    "SwiGLU save less a layer (planned; tunefleet's executor does not run it)", patched, hw))
    if not hw.gpu.runs(t.precision):
        out.append(("--precision fp16", f"{hw.gpu.display_name} has no bf16; fp16 mixed precision takes the same "
                    "memory", replace(t, precision=Precision.FP16), hw))
    if t.sequence_length >= 2 * MIN_SUGGESTED_SEQUENCE:
        shorter = t.sequence_length // 2
        out.append((f"--seq-len {shorter}", "halves the activations and the logits (longer examples are cut or "
                    "packed into more sequences)", replace(t, sequence_length=shorter), hw))
    if t.method.uses_adapters and t.lora.target_modules == (ALL_LINEAR,):
        qv = tuple(n for n in ("q_proj", "v_proj") if n in {layer.name for layer in linear_layers(model.architecture)})
        if qv:
            out.append((f"--lora-targets {','.join(qv)}", "adapts only the attention's query and value projections: "
                        "fewer adapter activations, gradients and optimizer states",
                        replace(t, lora=replace(t.lora, target_modules=qv)), hw))
    if hw.world_size > 1:
        for stage in range(t.zero_stage + 1, 4):
            out.append((f"ZeRO stage {stage}", "partitions more model state across the GPUs",
                        replace(t, zero_stage=stage), hw))
    if t.offload is Offload.NONE:
        stage = max(t.zero_stage, 2) if t.zero_stage < 3 else 3
        out.append((f"ZeRO stage {stage} with optimizer offload to CPU", "moves optimizer states to host RAM "
                    "(slower steps)", replace(t, zero_stage=stage, offload=Offload.OPTIMIZER), hw))
    if t.offload is not Offload.ALL and not t.method.quantises:
        out.append(("ZeRO stage 3 with parameter and optimizer offload", "keeps only the working layers on the "
                    "GPU (much slower steps)", replace(t, zero_stage=3, offload=Offload.ALL), hw))
    if t.method in (Method.FULL, Method.FREEZE):
        out.append(("LoRA instead of full fine-tuning", "trains adapters only: no full gradients or "
                    "optimizer states", replace(t, method=Method.LORA), hw))
    if t.method in (Method.LORA, Method.LORA_8BIT, Method.FULL):
        out.append(("QLoRA (4-bit NF4 base weights)", "stores base weights in about 0.52 bytes each",
                    replace(t, method=Method.QLORA, offload=Offload.NONE if t.offload is Offload.ALL else t.offload),
                    hw))
    for gpus in (2, 4, 8):
        if gpus > hw.gpus_per_node:
            out.append((f"{gpus} GPUs with ZeRO stage 3", "shards weights, gradients and optimizer states",
                        replace(t, zero_stage=3), replace(hw, gpus_per_node=gpus)))
    # the smallest other GPU that runs the job as is (precision included): a GPU that failed on bf16 alone may be
    # bigger than one that holds it
    usable = sorted((g for g in catalog.gpus if g.name != hw.gpu.name and g.vendor == hw.gpu.vendor
                     and g.runs(t.precision)),
                    key=lambda g: (g.memory_bytes, g.on_demand_hourly_usd or float("inf")))
    for gpu in usable:
        candidate = replace(hw, gpu=gpu, hourly_usd_per_gpu=gpu.on_demand_hourly_usd)
        if per_gpu_memory(model, t, candidate).total_bytes <= gpu.memory_bytes:
            out.append((f"a {gpu.display_name} ({gib(gpu.memory_bytes)})", "the smallest catalog GPU that holds "
                        "this configuration as is", t, candidate))
            break
    return out


def suggestions(model: ModelSpec, t: TrainingSpec, hw: Hardware, catalog: Catalog,
                best_mb: int) -> tuple[Suggestion, ...]:
    found: list[Suggestion] = []
    for change, reason, t2, hw2 in _variants(model, t, hw, catalog, best_mb):
        if not recipes.covers(model.architecture, t2, hw2.world_size):
            continue
        ok, gpu, _ = _fits(model, t2, hw2)
        ok = ok and hw2.gpu.runs(t2.precision)
        found.append(Suggestion(change, reason, gpu.total_bytes, ok, t2, hw2))
    fitting = [s for s in found if s.fits]
    return tuple(fitting) if fitting else tuple(sorted(found, key=lambda s: s.per_gpu_total_bytes)[:3])


def _image_tokens_note(t: TrainingSpec, vision_trained: bool) -> str:
    """How the image tokens were counted: the language model sees them inside the sequence, and the vision tower keeps
    activations for backward only when it trains (planner.activations)."""
    inside = (f"image tokens: {t.image_tokens:,} of each sequence's {t.sequence_length:,} tokens, counted in the "
              "language model's activations as any token")
    if vision_trained:
        return inside + "; the vision tower trains (--train-vision), so its activations over them are counted too"
    return inside + ("; the vision tower is frozen, so it keeps nothing for backward: its forward over them runs and "
                     "is freed before the language model's, below the peak, and more image tokens within the same "
                     "sequence length do not change the total (--train-vision would count its activations)")


def _hf_trainer_note(model: ModelSpec, t: TrainingSpec, hw: Hardware) -> str | None:
    """The figures are for tunefleet's executor, where DeepSpeed trains the whole module in bf16; under transformers'
    Trainer, PEFT's prepare_model_for_kbit_training keeps the rest of a QLoRA model and its activations in fp32
    (planner/recipes.py). None where the hf-trainer model does not cover the job, or runs it under DeepSpeed, whose
    bf16 engine casts the model back to bf16 as the executor does."""
    hf = replace(t, recipe=Recipe.HF_TRAINER)
    if not recipes.fp32_stream(hf):
        return None
    try:
        total = per_gpu_memory(model, hf, hw).total_bytes
    except UnsupportedError:
        return None
    return (f"trained with transformers' Trainer + PEFT (--recipe hf-trainer) instead of tunefleet's executor, it "
            f"needs {gib(total)} per GPU: fp32 non-4-bit weights and activations (prepare_model_for_kbit_training)")


HF_TRAINER_NOTE = ("recipe hf-trainer: planned as transformers' Trainer + PEFT runs the job — without DeepSpeed at "
                   "ZeRO 0, under ZeRO 2 or 3 with LLaMA-Factory's DeepSpeed configs, or sharded by FSDP with PEFT's "
                   "example config (simulated, make bench-simulate); tunefleet's executor runs its own recipe and "
                   "refuses this plan: plan with --recipe tunefleet to run it on the fleet")
TRL_SFT_NOTE = ("recipe trl-sft: planned as TRL's SFTTrainer + PEFT runs the job with its defaults (its fused LM head, "
                "adamw_torch_fused) — without DeepSpeed at ZeRO 0, under ZeRO 2 or 3 with LLaMA-Factory's DeepSpeed "
                "configs (simulated, make bench-simulate); tunefleet's executor runs its own recipe and "
                "refuses this plan: plan with --recipe tunefleet to run it on the fleet")
TRL_DPO_NOTE = ("recipe trl-dpo: planned as TRL's DPOTrainer + PEFT runs the job with its defaults (chosen and "
                "rejected through its fused LM head, dropout off, adamw_torch_fused; the reference the base with the "
                "adapter off, a frozen copy for a full fine-tune, or precomputed), with every position of a pair "
                "scored, the most a pair of that length can cost (simulated, make bench-simulate); tunefleet's "
                "executor runs its own recipe and refuses this plan: plan with --recipe tunefleet to run it on the "
                "fleet")
TORCHTUNE_NOTE = ("recipe torchtune: planned as torchtune's single-device recipe runs the job with its configs' "
                  "defaults (its own model in bf16, bf16 AdamW states, the chunked cross-entropy, which keeps every "
                  "chunk's fp32 log-softmax until backward), simulated with the recipe itself (make bench-simulate); "
                  "tunefleet's executor runs its own recipe and refuses this plan: plan with --recipe tunefleet to run "
                  "it on the fleet")
RECIPE_NOTES = {Recipe.HF_TRAINER: HF_TRAINER_NOTE, Recipe.TRL_SFT: TRL_SFT_NOTE, Recipe.TRL_DPO: TRL_DPO_NOTE,
                Recipe.TORCHTUNE: TORCHTUNE_NOTE}


def _dpo_note(t: TrainingSpec, gpu: MemoryBreakdown) -> str:
    """Where the DPO reference lives, so the breakdown's terms read as what it holds."""
    loss = "TRL's fused LM head" if recipes.fused_head(t) else "logits"
    pairs = (f"activations and {loss} cover chosen + rejected ({t.sequences_per_example} × {t.micro_batch_size} "
             "sequences in one forward pass)")
    if t.dpo.precompute_reference:
        return f"DPO: reference log-probs computed once before step 1 and kept with the job, none held; {pairs}"
    if t.uses_reference_model:
        return f"DPO: weights include a frozen reference copy (half of {gib(gpu.weights_bytes)}); {pairs}"
    return f"DPO: the reference is the base model with the adapter disabled, no second copy; {pairs}"


LIGER_NOTE = ("liger: planned with Liger's kernels as the Trainer's use_liger_kernel applies them (RMSNorm, SwiGLU, "
              "RoPE; under hf-trainer its fused linear cross-entropy, no logits), simulated with liger-kernel's own "
              "functions (make bench-simulate); the step time is planned as without them")


def _transformers_note(t: TrainingSpec) -> str:
    """What the plan counts for the transformers release a Trainer's script runs (planner.recipes)."""
    counted = [what for applies, what in (
        (recipes.checkpoints_outside_fsdp_units(t), "each layer checkpointed from outside its FSDP unit, whose "
         "recomputed input and its gradient are kept to the end of backward (reentrant, that release's default)"),
        (recipes.repeats_kv(t), "SDPA's k and v copied to every query head"))
        if applies]
    return f"transformers {t.transformers_version}: planned with " + ("; ".join(counted) if counted else
                                                                     "nothing that release allocates differently") + \
        " (simulated on transformers 4.45.2, make bench-simulate)"


BF16_PURE_NOTE = ("bf16-pure (no fp32 master weights, bf16 optimizer states) is what recipes such as torchtune's run; "
                  "tunefleet's executor trains with DeepSpeed, whose bf16 optimizer keeps fp32 master weights and "
                  "states, so it refuses this plan: plan --precision bf16 to run it on the fleet")


def check_margin(margin_fraction: float) -> None:
    if not 0.0 <= margin_fraction <= MAX_MARGIN_FRACTION:
        raise InvalidFieldError("margin_fraction", f"must be between 0 and {MAX_MARGIN_FRACTION} (a fraction of the "
                                                   f"predicted total: 0.1 is 10 %), got {margin_fraction}")


def fit(model: ModelSpec, t: TrainingSpec, hw: Hardware, catalog: Catalog, margin_fraction: float = 0.0) -> FitResult:
    """Whether the job fits, term by term, how sure that is (`band`), and what to change when it does not. A margin
    demands that much headroom beyond the predicted total (0.1: 10 % of it)."""
    check_margin(margin_fraction)
    ok, gpu, host = _fits(model, t, hw)
    if max(gpu.total_bytes, host.total_bytes) > MAX_REPORTABLE_BYTES:
        raise InvalidFieldError("training.sequence_length",
                                f"this configuration needs {max(gpu.total_bytes, host.total_bytes):.3g} bytes, "
                                "beyond any hardware and beyond what the answer can carry; shorten "
                                "sequence_length, lower micro_batch_size or enable gradient checkpointing")
    best = max_micro_batch(model, t, hw)
    split = parameter_split(model.architecture, t.method, t.lora, t.train_vision_tower, t.freeze_trainable_layers)
    notes: list[str] = []
    needed = int(gpu.total_bytes * (1 + margin_fraction))
    if margin_fraction and ok and needed > hw.gpu.memory_bytes:
        ok = False
        notes.append(f"with the {margin_fraction:.0%} margin asked for it needs {gib(needed)} per GPU on a "
                     f"{gib(hw.gpu.memory_bytes)} {hw.gpu.display_name}")
    if gpu.total_bytes > hw.gpu.memory_bytes:
        needs = "loading" if gpu.loading_decides_peak else f"micro-batch {t.micro_batch_size}"
        notes.append(f"{needs} needs {gib(gpu.total_bytes)} per GPU on a "
                     f"{gib(hw.gpu.memory_bytes)} {hw.gpu.display_name}")
    if not host.fits:
        notes.append(f"host RAM: needs {gib(host.total_bytes)} per node, the node has {gib(host.capacity_bytes)}")
    if not hw.gpu.runs(t.precision):
        ok = False
        notes.append(f"{hw.gpu.display_name} has no bf16 support: use --precision fp16")
    if t.method is Method.QLORA and hw.gpu.vendor != "nvidia":
        notes.append("bitsandbytes 4-bit kernels target NVIDIA GPUs; QLoRA support elsewhere is experimental")
    if t.recipe in RECIPE_NOTES:
        notes.append(RECIPE_NOTES[t.recipe])
    elif t.method is Method.QLORA and (hf_note := _hf_trainer_note(model, t, hw)) is not None:
        notes.append(hf_note)
    if t.liger:
        notes.append(LIGER_NOTE)
    if t.transformers_version:
        notes.append(_transformers_note(t))
    if gpu.loading_decides_peak:
        notes.append(f"loading is the peak: {gib(gpu.loading_bytes)} on every GPU, the whole {t.method.value} model "
                     "(transformers places a quantised model whole on each GPU, PEFT upcasts what is not quantised "
                     "to fp32, and only then does DeepSpeed partition it), above what a step needs; more GPUs do not "
                     "lower it, a GPU with more memory does")
    if t.objective is Objective.DPO:
        notes.append(_dpo_note(t, gpu))
    if model.architecture.vision is not None and t.image_tokens:
        notes.append(_image_tokens_note(t, split.vision_trainable))
    if t.precision is Precision.BF16_PURE and t.recipe is not Recipe.TORCHTUNE:
        notes.append(BF16_PURE_NOTE)
    if model.note:
        notes.append(model.note)
    likely, probability = band(gpu, model.architecture, t), None
    calibrated = calibration.likely(cal, gpu.allocated_bytes, hw.gpu.memory_bytes, gpu.cuda_context_bytes) \
        if (cal := catalog.calibration(hw.gpu.name)) is not None else None
    if calibrated is not None:
        likely = Band(calibrated.low_bytes, calibrated.high_bytes, calibrated.basis)
        probability = calibrated.fit_probability
    tight = ok and likely.high_bytes > hw.gpu.memory_bytes
    found = suggestions(model, t, hw, catalog, best) if not ok else ()
    if tight:  # the changes that bring even the likely range's top under the GPU's memory (it scales with the total)
        room = hw.gpu.memory_bytes / likely.high_bytes
        found = tuple(s for s in suggestions(model, t, hw, catalog, best)
                      if s.fits and s.per_gpu_total_bytes <= gpu.total_bytes * room)
    if tight:
        notes.append(f"tight: the peak is likely {gib(likely.low_bytes)}-{gib(likely.high_bytes)} and the GPU holds "
                     f"{gib(hw.gpu.memory_bytes)}; " + ("take a suggestion below, each of which leaves room for that "
                                                        "range, or plan with a margin (--margin)" if found else
                                                        "plan with a margin (--margin) to see what leaves room"))
    return FitResult(ok, gpu, host, hw.gpu.memory_bytes, best, split.trainable, found, tuple(notes), model, t, hw,
                     likely, margin_fraction, fit_probability=probability)
