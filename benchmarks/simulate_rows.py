"""The configurations make bench-simulate holds the planner to (`table_rows`), each a model, a training spec and a
world size (`Row`), those among them that ran for real elsewhere (`THIRD_PARTY_RESERVED`), and where their
simulated peaks are stored (`RESULTS_CSV`)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks.common import RESULTS
from contract.schema import (
    ALL_LINEAR,
    Attention,
    DpoSpec,
    LoadDtype,
    LoraSpec,
    Method,
    Objective,
    Precision,
    Recipe,
    Sharding,
    TrainingSpec,
)

RESULTS_CSV = RESULTS / "simulate.csv"
# the transformers release of .venv-legacy, as requirements-legacy.txt pins it: the rows on an older stack name it
LEGACY_TRANSFORMERS = next(line.removeprefix("transformers==") for line in
                           (Path(__file__).resolve().parent.parent / "requirements-legacy.txt").read_text().splitlines()
                           if line.startswith("transformers=="))


@dataclass(frozen=True)
class Row:
    model: str
    training: TrainingSpec
    world_size: int = 1

    @property
    def label(self) -> str:
        t = self.training
        targets = ",".join(t.lora.target_modules) if t.method.uses_adapters else ""
        objective = ""
        if t.objective is Objective.DPO:
            reference = "precomputed" if t.dpo.precompute_reference else "copy" if t.uses_reference_model else \
                "adapter-off"
            objective = f"dpo({reference}) "
        recipe = "" if t.recipe is Recipe.TUNEFLEET else f"{t.recipe.value} "
        recipe += "fp32-loaded " if t.load_dtype is LoadDtype.FP32 else ""
        recipe += "liger " if t.liger else ""
        recipe += f"transformers-{t.transformers_version} " if t.transformers_version else ""
        adapted = f"[{targets}]" if targets else ""
        return (f"{recipe}{self.model.split('/')[-1]} {objective}{t.method.value}{adapted} "
                f"mb{t.micro_batch_size}x{t.sequence_length} {'ckpt ' if t.gradient_checkpointing else ''}"
                f"{t.attention.value} {'fsdp' if t.sharding is Sharding.FSDP else 'z'}{t.zero_stage} "
                f"x{self.world_size}")


def table_rows() -> list[Row]:
    """The configurations the planner is held to (issue 10): seven families, a 70B over 8 ranks; full / LoRA (q,v
    and all-linear) / freeze; micro-batch 1-4; sequence 512-8192; checkpointing on and off; eager and SDPA;
    ZeRO 0-3. Offload is not simulated: with the CPU accelerator, device and host memory are the same memory, so
    the counter cannot tell what an offloaded step keeps on the GPU (and DeepSpeedCPUAdam is a C++ kernel that
    needs real tensors)."""
    every = LoraSpec(target_modules=(ALL_LINEAR,))
    lora, full, freeze = Method.LORA, Method.FULL, Method.FREEZE
    eager = Attention.EAGER

    def spec(method: Method, mb: int, seq: int, *, ckpt: bool = True, attn: Attention = Attention.SDPA, zero: int = 0,
             lora_spec: LoraSpec = every) -> TrainingSpec:
        return TrainingSpec(method=method, micro_batch_size=mb, sequence_length=seq, gradient_checkpointing=ckpt,
                            attention=attn, zero_stage=zero, lora=lora_spec,
                            freeze_trainable_layers=2 if method is freeze else 0)

    rows = []
    for model in ("meta-llama/Llama-3.1-8B", "Qwen/Qwen2.5-7B", "mistralai/Mistral-7B-v0.3", "google/gemma-2-9b",
                  "microsoft/Phi-3-mini-4k-instruct", "Qwen/Qwen3-8B"):
        # transformers 5 runs Gemma 2 with eager attention only (Gemma2PreTrainedModel: no SDPA support)
        sdpa = eager if "gemma-2" in model else Attention.SDPA
        # Phi-3 fuses q, k and v into one projection
        qv = LoraSpec(target_modules=("qkv_proj",) if "Phi-3" in model else ("q_proj", "v_proj"))
        rows += [Row(model, spec(lora, 1, 2048, lora_spec=qv, attn=sdpa)),
                 Row(model, spec(lora, 2, 2048, attn=sdpa)),
                 Row(model, spec(lora, 4, 512, ckpt=False, attn=sdpa)),
                 Row(model, spec(lora, 1, 1024, ckpt=False, attn=eager, lora_spec=qv)),
                 Row(model, spec(lora, 1, 4096, attn=eager)),
                 Row(model, spec(lora, 1, 8192, attn=sdpa)),
                 Row(model, spec(lora, 2, 2048, zero=2, attn=sdpa), 2),
                 Row(model, spec(full, 1, 2048, zero=2, attn=sdpa), 4),
                 Row(model, spec(full, 1, 2048, zero=3, attn=sdpa), 4),
                 Row(model, spec(full, 2, 1024, zero=1, attn=sdpa), 8),
                 Row(model, spec(freeze, 1, 2048, zero=0, attn=sdpa))]
    q_v = LoraSpec(target_modules=("q_proj", "v_proj"))

    def dpo(t: TrainingSpec, precompute: bool = False) -> TrainingSpec:
        return replace(t, objective=Objective.DPO, dpo=DpoSpec(precompute_reference=precompute))

    rows += [Row("meta-llama/Llama-3.1-8B", spec(full, 1, 2048)),
             Row("meta-llama/Llama-3.1-8B", spec(lora, 1, 2048, zero=3), 2),
             Row("meta-llama/Llama-3.2-1B", spec(lora, 1, 2048, zero=3), 2),
             # ZeRO-3 on one rank: the partition is the whole parameter, nothing is gathered (measured on an H100 too,
             # benchmarks/results/gpu_measurements_h100.csv)
             Row("meta-llama/Llama-3.2-1B", spec(full, 2, 2048, zero=3)),
             Row("meta-llama/Llama-3.1-8B", spec(lora, 2, 4096, zero=3)),
             # DPO: chosen and rejected in one forward; the reference the adapter off, a frozen copy, or precomputed
             Row("meta-llama/Llama-3.1-8B", dpo(spec(lora, 1, 2048))),
             Row("meta-llama/Llama-3.1-8B", dpo(spec(lora, 2, 1024, ckpt=False))),
             Row("meta-llama/Llama-3.1-8B", dpo(spec(lora, 1, 2048), precompute=True)),
             Row("meta-llama/Llama-3.1-8B", replace(dpo(spec(lora, 1, 2048)), dpo_reference_model=True)),
             Row("meta-llama/Llama-3.1-8B", dpo(spec(full, 1, 2048, zero=3)), 4),
             Row("Qwen/Qwen2.5-7B", dpo(spec(lora, 1, 4096))),
             Row("Qwen/Qwen1.5-MoE-A2.7B", spec(lora, 2, 2048)),
             Row("Qwen/Qwen1.5-MoE-A2.7B", spec(full, 1, 4096, zero=3), 4),
             Row("Qwen/Qwen3-30B-A3B", spec(lora, 1, 4096)),
             Row("Qwen/Qwen3-30B-A3B", spec(lora, 2, 2048, zero=3), 4),
             Row("Qwen/Qwen3-30B-A3B", spec(full, 1, 2048, zero=3), 8),
             Row("allenai/OLMo-2-1124-7B", spec(lora, 1, 2048, lora_spec=q_v)),
             Row("allenai/OLMo-2-1124-7B", spec(lora, 2, 2048)),
             Row("allenai/OLMo-2-1124-7B", spec(lora, 1, 1024, ckpt=False, attn=Attention.EAGER)),
             Row("allenai/OLMo-2-1124-7B", spec(full, 1, 2048, zero=3), 4),
             Row("microsoft/phi-2", spec(lora, 2, 2048, attn=Attention.EAGER)),
             Row("microsoft/phi-2", spec(lora, 1, 1024, ckpt=False, attn=Attention.EAGER)),
             Row("microsoft/phi-2", spec(full, 1, 2048, zero=2, attn=Attention.EAGER), 2),
             Row("google/gemma-3-1b-pt", spec(lora, 4, 2048)),
             Row("google/gemma-3-1b-pt", spec(full, 2, 1024, ckpt=False, attn=Attention.EAGER)),
             # StarCoder2 with its released dropout (0.1 on embeddings, attention probabilities and outputs)
             Row("bigcode/starcoder2-3b", spec(lora, 2, 2048)),
             Row("bigcode/starcoder2-7b", spec(lora, 1, 1024, ckpt=False, attn=Attention.EAGER)),
             Row("bigcode/starcoder2-3b", spec(full, 1, 2048, zero=2), 2),
             Row("HuggingFaceTB/SmolLM3-3B", spec(lora, 2, 4096)),
             Row("HuggingFaceTB/SmolLM3-3B", spec(full, 1, 4096, zero=2), 2),
             # a mixture of experts: all-linear adapts the attention (the experts are 3-D tensors, not linears)
             Row("mistralai/Mixtral-8x7B-v0.1", spec(lora, 1, 2048, lora_spec=q_v)),
             Row("mistralai/Mixtral-8x7B-v0.1", spec(lora, 2, 2048)),
             Row("mistralai/Mixtral-8x7B-v0.1", spec(lora, 4, 512, ckpt=False)),
             Row("mistralai/Mixtral-8x7B-v0.1", spec(lora, 1, 4096, zero=3), 8),
             Row("mistralai/Mixtral-8x7B-v0.1", spec(full, 1, 2048, zero=3), 8),
             Row("meta-llama/Llama-3.1-70B", spec(lora, 1, 2048, zero=3), 8),
             Row("meta-llama/Llama-3.1-70B", spec(full, 1, 2048, zero=3), 8),
             # DeepSeek-V3's layout: latent attention (SDPA as CUDA's memory-efficient kernel), a dense layer, then
             # 64 routed experts (6 a token) and 2 shared; all-linear adapts the attention
             Row("moonshotai/Moonlight-16B-A3B", spec(lora, 1, 2048)),
             Row("moonshotai/Moonlight-16B-A3B", spec(lora, 2, 1024, ckpt=False, attn=Attention.EAGER)),
             Row("moonshotai/Moonlight-16B-A3B", spec(full, 1, 2048, zero=3), 8),
             Row("deepseek-ai/DeepSeek-V2-Lite", spec(lora, 2, 2048)),
             # gpt-oss (eager attention only: its sinks), bf16 experts as training dequantises its MXFP4 ones
             Row("openai/gpt-oss-20b", spec(lora, 1, 2048, attn=Attention.EAGER)),
             Row("openai/gpt-oss-20b", spec(lora, 2, 1024, ckpt=False, attn=Attention.EAGER)),
             # GLM-4.5's layout (eager: SDPA after its partial-rotary cat is the CPU's head-major case, as Phi's)
             Row("zai-org/GLM-4.5-Air", spec(lora, 1, 2048, zero=3, attn=Attention.EAGER), 8),
             Row("zai-org/GLM-4.5-Air", spec(full, 1, 1024, zero=3, attn=Attention.EAGER), 8),
             # without checkpointing every layer's forward keeps its gathered experts (planner.memory:
             # regathered_experts_bytes)
             Row("zai-org/GLM-4.5-Air", spec(lora, 1, 256, ckpt=False, zero=3, attn=Attention.EAGER), 8)]
    # Llama 4's language model: every expert computed for every token (Scout's 16 in every layer, Maverick's 128 in
    # every other one), NoPE layers, complex RoPE and L2 q/k norms (Scout); all-linear adapts the attention, the shared
    # experts and Maverick's dense MLPs
    rows += [Row("meta-llama/Llama-4-Scout-17B-16E", spec(lora, 1, 2048, zero=3), 8),
             Row("meta-llama/Llama-4-Scout-17B-16E", spec(lora, 1, 1024, ckpt=False, zero=3), 8),
             Row("meta-llama/Llama-4-Scout-17B-16E", spec(full, 1, 2048, zero=3), 8),
             Row("meta-llama/Llama-4-Maverick-17B-128E", spec(lora, 1, 2048, zero=3), 8)]
    # QLoRA: NF4 base weights with nested absmax (bitsandbytes under fake tensors: benchmarks/quantised.py); 1,024
    # tokens a micro-batch is where the CUDA kernel's choice depends on the GPU (the fallback is simulated)
    qlora = Method.QLORA
    peft_zero3 = LoraSpec(target_modules=(ALL_LINEAR,), rank=8, alpha=16, dropout=0.1)
    rows += [Row("meta-llama/Llama-3.1-8B", spec(qlora, 1, 2048)),
             Row("meta-llama/Llama-3.1-8B", spec(qlora, 2, 2048, lora_spec=q_v)),
             Row("meta-llama/Llama-3.1-8B", spec(qlora, 1, 1024, ckpt=False, attn=eager)),
             Row("meta-llama/Llama-3.1-8B", spec(qlora, 2, 2048, zero=2), 2),
             # ZeRO-3: from_pretrained places a quantised model whole on every GPU before DeepSpeed partitions it
             # (planner.loading); PEFT's ZeRO-3 QLoRA guide's configuration on 2 ranks
             Row("meta-llama/Llama-3.2-1B", spec(qlora, 1, 2048, zero=3), 2),
             Row("meta-llama/Llama-3.1-8B", spec(qlora, 1, 2048, zero=3), 4),
             Row("meta-llama/Llama-2-70b-hf", spec(qlora, 2, 2048, lora_spec=peft_zero3, zero=3), 2),
             Row("mistralai/Mistral-7B-v0.3", spec(qlora, 1, 4096)),
             Row("Qwen/Qwen2.5-7B", spec(qlora, 4, 512, ckpt=False)),
             Row("google/gemma-2-9b", spec(qlora, 1, 2048, attn=eager)),
             Row("meta-llama/Llama-3.1-70B", spec(qlora, 1, 2048)),
             # a mixture of experts: bitsandbytes quantises the linears, not the fused 3-D expert tensors
             Row("Qwen/Qwen1.5-MoE-A2.7B", spec(qlora, 1, 1024, lora_spec=q_v)),
             Row("Qwen/Qwen3-30B-A3B", spec(qlora, 1, 2048)),
             # DeepSeek-V3's layout: its dense MLP and shared experts are linears bitsandbytes quantises
             Row("moonshotai/Moonlight-16B-A3B", spec(qlora, 1, 2048))]
    # 8-bit LoRA: LLM.int8 base weights (int8 rows, fp32 row absmax), bitsandbytes' matmul allocating as its CUDA
    # kernels do with planner.constants.LLM_INT8_OUTLIER_COLUMNS outlier columns (benchmarks/quantised.py)
    int8 = Method.LORA_8BIT
    rows += [Row("meta-llama/Llama-3.1-8B", spec(int8, 1, 2048)),
             Row("meta-llama/Llama-3.1-8B", spec(int8, 2, 1024, ckpt=False, lora_spec=q_v)),
             Row("Qwen/Qwen2.5-7B", spec(int8, 1, 4096)),
             Row("mistralai/Mistral-7B-v0.3", spec(int8, 4, 512, lora_spec=q_v)),
             Row("meta-llama/Llama-3.1-70B", spec(int8, 1, 2048))]
    # hf-trainer: transformers' Trainer + PEFT on one GPU under bf16 autocast (benchmarks/recipes.py); the rows of
    # THIRD_PARTY_RESERVED are the configurations of fms-acceleration's measurements
    qkvo = LoraSpec(target_modules=("q_proj", "k_proj", "v_proj", "o_proj"), rank=16, alpha=32)

    def hf(t: TrainingSpec) -> TrainingSpec:
        return replace(t, recipe=Recipe.HF_TRAINER)

    rows += [Row("mistralai/Mistral-7B-v0.3", hf(spec(qlora, 4, 4096, lora_spec=qkvo))),
             Row("mistralai/Mistral-7B-v0.3", hf(spec(qlora, 1, 1024, lora_spec=qkvo))),
             Row("mistralai/Mistral-7B-v0.3", hf(spec(lora, 1, 2048, lora_spec=qkvo))),
             Row("meta-llama/Llama-3.1-8B", hf(spec(qlora, 1, 2048))),
             Row("meta-llama/Llama-3.1-8B", hf(spec(lora, 2, 2048))),
             Row("Qwen/Qwen2.5-7B", hf(spec(qlora, 2, 2048))),
             Row("Qwen/Qwen3-8B", hf(spec(qlora, 1, 4096, lora_spec=q_v))),
             Row("meta-llama/Llama-3.2-1B", hf(spec(qlora, 8, 2048))),
             Row("meta-llama/Llama-3.1-70B", hf(spec(qlora, 1, 2048))),
             Row("mistralai/Mistral-7B-v0.3", hf(spec(qlora, 8, 4096, lora_spec=qkvo))),
             Row("mistralai/Mistral-7B-v0.3", hf(spec(lora, 4, 4096, lora_spec=qkvo))),
             Row("mistralai/Mistral-7B-v0.3", hf(spec(lora, 8, 4096, lora_spec=qkvo)))]
    # trl-sft: TRL's SFTTrainer with its defaults and the plan's LoRA (benchmarks/recipes.py): its fused LM head never
    # builds the logits, so a large vocabulary (Llama 3's, Qwen's, Gemma's) is where it parts from hf-trainer

    def sft(t: TrainingSpec) -> TrainingSpec:
        return replace(t, recipe=Recipe.TRL_SFT)

    rows += [Row("meta-llama/Llama-3.1-8B", sft(spec(lora, 2, 2048))),
             Row("meta-llama/Llama-3.1-8B", sft(spec(qlora, 1, 4096))),
             Row("meta-llama/Llama-3.1-8B", sft(spec(lora, 4, 512, ckpt=False))),
             Row("Qwen/Qwen2.5-7B", sft(spec(qlora, 2, 2048, lora_spec=q_v))),
             Row("Qwen/Qwen3-8B", sft(spec(lora, 1, 8192))),
             Row("mistralai/Mistral-7B-v0.3", sft(spec(qlora, 4, 4096, lora_spec=qkvo))),
             Row("mistralai/Mistral-7B-v0.3", sft(spec(lora, 1, 1024, ckpt=False, attn=eager, lora_spec=qkvo))),
             Row("meta-llama/Llama-3.2-1B", sft(spec(lora, 8, 2048))),
             Row("meta-llama/Llama-3.1-70B", sft(spec(qlora, 1, 2048))),
             # full fine-tuning under either: the model loaded in bf16, its weights, gradients and AdamW states bf16
             Row("meta-llama/Llama-3.2-1B", sft(spec(full, 4, 2048))),
             Row("Qwen/Qwen2.5-7B", sft(spec(full, 1, 4096))),
             Row("meta-llama/Llama-3.2-1B", hf(spec(full, 2, 2048))),
             Row("Qwen/Qwen2.5-0.5B", hf(spec(full, 4, 1024, ckpt=False)))]
    # hf-trainer under DeepSpeed on several GPUs, with LLaMA-Factory's ZeRO 2 and 3 configs (planner.trainer_deepspeed)
    rows += [Row("meta-llama/Llama-3.2-1B", hf(spec(lora, 1, 2048, zero=2)), 2),
             Row("meta-llama/Llama-3.2-1B", hf(spec(lora, 1, 2048, zero=3)), 2),
             Row("meta-llama/Llama-3.2-1B", hf(spec(full, 1, 2048, zero=2)), 4),
             Row("meta-llama/Llama-3.2-1B", hf(spec(full, 1, 2048, zero=3)), 4),
             Row("meta-llama/Llama-3.1-8B", hf(spec(lora, 2, 2048, zero=2)), 2),
             Row("meta-llama/Llama-3.1-8B", hf(spec(qlora, 1, 2048, zero=2)), 2),
             Row("meta-llama/Llama-3.1-8B", hf(spec(full, 1, 2048, zero=2)), 4),
             Row("meta-llama/Llama-3.1-8B", hf(spec(full, 1, 2048, zero=3)), 4),
             Row("Qwen/Qwen2.5-7B", hf(spec(full, 2, 1024, zero=2)), 8),
             Row("mistralai/Mistral-7B-v0.3", hf(spec(qlora, 2, 4096, lora_spec=qkvo, zero=2)), 2),
             Row("Qwen/Qwen3-8B", hf(spec(lora, 1, 4096, zero=3)), 4),
             Row("meta-llama/Llama-3.1-70B", hf(spec(lora, 2, 2048, zero=3)), 8)]
    # trl-sft under DeepSpeed: the same configs, SFTTrainer's fused head and adamw_torch_fused
    rows += [Row("meta-llama/Llama-3.1-8B", sft(spec(lora, 2, 2048, zero=2)), 2),
             Row("meta-llama/Llama-3.1-8B", sft(spec(qlora, 1, 4096, zero=2)), 2),
             Row("meta-llama/Llama-3.1-8B", sft(spec(full, 1, 2048, zero=3)), 4),
             Row("meta-llama/Llama-3.2-1B", sft(spec(full, 2, 2048, zero=2)), 4),
             Row("Qwen/Qwen2.5-7B", sft(spec(lora, 1, 4096, zero=3)), 4)]
    # trl-dpo: TRL's DPOTrainer with its defaults, chosen and rejected through the fused head; the reference the base
    # with the adapter off, a frozen copy (full) or precomputed

    def trl_dpo(t: TrainingSpec, precompute: bool = False) -> TrainingSpec:
        return replace(t, recipe=Recipe.TRL_DPO, objective=Objective.DPO, dpo=DpoSpec(precompute_reference=precompute))

    rows += [Row("meta-llama/Llama-3.1-8B", trl_dpo(spec(lora, 1, 2048))),
             Row("meta-llama/Llama-3.1-8B", trl_dpo(spec(lora, 1, 2048), precompute=True)),
             Row("meta-llama/Llama-3.1-8B", trl_dpo(spec(qlora, 1, 2048))),
             Row("meta-llama/Llama-3.2-1B", trl_dpo(spec(full, 2, 2048))),
             Row("Qwen/Qwen2.5-7B", trl_dpo(spec(lora, 1, 4096))),
             Row("mistralai/Mistral-7B-v0.3", trl_dpo(spec(qlora, 2, 2048, lora_spec=qkvo))),
             # under the Trainer's ZeRO-2: TRL's prepare_deepspeed holds a full fine-tune's frozen copy whole
             Row("meta-llama/Llama-3.1-8B", trl_dpo(spec(lora, 1, 2048, zero=2)), 2),
             Row("meta-llama/Llama-3.1-8B", trl_dpo(spec(qlora, 1, 2048, zero=2)), 2),
             Row("meta-llama/Llama-3.2-1B", trl_dpo(spec(full, 1, 2048, zero=2)), 4)]
    # hf-trainer sharded by FSDP (planner.trainer_fsdp: PEFT's example config through accelerate), LoRA, full
    # fine-tuning and QLoRA; the 70B LoRA rows are the configuration of PEFT's Llama-2-70B example on 8 GPUs

    peft_example = LoraSpec(rank=8, alpha=16, dropout=0.1)

    def fsdp(t: TrainingSpec) -> TrainingSpec:
        return replace(t, recipe=Recipe.HF_TRAINER, sharding=Sharding.FSDP, zero_stage=3)

    rows += [Row("meta-llama/Llama-3.2-1B", fsdp(spec(lora, 1, 2048)), 2),
             Row("meta-llama/Llama-3.2-1B", fsdp(spec(lora, 4, 512, ckpt=False)), 2),
             Row("meta-llama/Llama-3.2-1B", fsdp(spec(full, 1, 2048)), 4),
             Row("meta-llama/Llama-3.1-8B", fsdp(spec(lora, 2, 2048)), 8),
             Row("meta-llama/Llama-3.1-8B", fsdp(spec(full, 1, 2048)), 4),
             Row("mistralai/Mistral-7B-v0.3", fsdp(spec(lora, 2, 4096, lora_spec=qkvo)), 2),
             Row("Qwen/Qwen2.5-7B", fsdp(spec(lora, 1, 4096, lora_spec=q_v)), 4),
             Row("meta-llama/Llama-3.1-70B", fsdp(spec(lora, 8, 2048, lora_spec=peft_example)), 8),
             # loaded in fp32 as PEFT's example script loads it (the frozen shards fp32, the units gathered in bf16)
             Row("meta-llama/Llama-3.2-1B", replace(fsdp(spec(lora, 1, 2048)), load_dtype=LoadDtype.FP32), 2),
             Row("meta-llama/Llama-3.1-70B", replace(fsdp(spec(lora, 8, 2048, lora_spec=peft_example)),
                                                     load_dtype=LoadDtype.FP32), 8),
             # QLoRA, not k-bit prepared, 4-bit weights stored as bf16: PEFT's Llama-2-70B FSDP-QLoRA example on two
             # GPUs, and fms-acceleration's QLoRA configurations
             Row("meta-llama/Llama-2-70b-hf", fsdp(spec(qlora, 2, 2048, lora_spec=peft_example)), 2),
             Row("meta-llama/Llama-2-70b-hf", fsdp(spec(qlora, 2, 4096, lora_spec=qkvo)), 2),
             Row("mistralai/Mistral-7B-v0.3", fsdp(spec(qlora, 2, 4096, lora_spec=qkvo)), 2),
             Row("meta-llama/Llama-3.1-8B", fsdp(spec(qlora, 1, 2048)), 4)]
    # Liger's kernels under either trainer (benchmarks/liger.py): hf-trainer's loss fused with the head (no logits),
    # both trainers' RMSNorm, SwiGLU and RoPE; without DeepSpeed and under ZeRO 2-3

    def liger(t: TrainingSpec) -> TrainingSpec:
        return replace(t, liger=True)

    rows += [Row("meta-llama/Llama-3.1-8B", liger(hf(spec(lora, 2, 2048)))),
             Row("meta-llama/Llama-3.1-8B", liger(hf(spec(qlora, 1, 2048)))),
             Row("meta-llama/Llama-3.2-1B", liger(hf(spec(lora, 1, 2048, ckpt=False)))),
             Row("Qwen/Qwen3-8B", liger(hf(spec(lora, 1, 4096, lora_spec=q_v)))),
             Row("Qwen/Qwen2.5-7B", liger(hf(spec(qlora, 2, 2048)))),
             Row("mistralai/Mistral-7B-v0.3", liger(hf(spec(lora, 4, 4096, lora_spec=qkvo)))),
             Row("mistralai/Mistral-7B-v0.3", liger(hf(spec(qlora, 8, 4096, lora_spec=qkvo)))),
             Row("meta-llama/Llama-3.2-1B", liger(hf(spec(full, 2, 2048)))),
             Row("Qwen/Qwen2.5-0.5B", liger(hf(spec(full, 4, 1024, ckpt=False)))),
             Row("HuggingFaceTB/SmolLM3-3B", liger(hf(spec(lora, 2, 4096)))),
             Row("meta-llama/Llama-3.1-8B", liger(sft(spec(qlora, 1, 4096)))),
             Row("Qwen/Qwen3-8B", liger(sft(spec(lora, 1, 8192)))),
             Row("meta-llama/Llama-3.2-1B", liger(sft(spec(full, 4, 2048)))),
             Row("meta-llama/Llama-3.1-8B", liger(hf(spec(lora, 2, 2048, zero=2))), 2),
             Row("meta-llama/Llama-3.2-1B", liger(hf(spec(full, 1, 2048, zero=3))), 4),
             Row("Qwen/Qwen2.5-7B", liger(sft(spec(lora, 1, 4096, zero=3))), 4)]
    # torchtune: its single-device recipes run by the recipe itself (benchmarks/torchtune_recipe.py), bf16 throughout,
    # its chunked loss; LoRA with and without checkpointing, full fine-tuning with a tied and an untied head

    def tune(t: TrainingSpec) -> TrainingSpec:
        return replace(t, recipe=Recipe.TORCHTUNE, precision=Precision.BF16_PURE)

    rows += [Row("meta-llama/Llama-3.2-1B", tune(spec(lora, 2, 2048))),
             Row("meta-llama/Llama-3.2-1B", tune(spec(lora, 2, 1024, ckpt=False))),
             Row("meta-llama/Llama-3.2-1B", tune(spec(full, 2, 2048))),
             Row("meta-llama/Llama-3.2-1B", tune(spec(full, 1, 1024, ckpt=False))),
             Row("meta-llama/Llama-3.1-8B", tune(spec(lora, 4, 4096, lora_spec=q_v))),
             Row("Qwen/Qwen2.5-7B", tune(spec(lora, 1, 2048))),
             Row("Qwen/Qwen2.5-0.5B", tune(spec(full, 4, 2048))),
             Row("Qwen/Qwen2.5-0.5B", tune(spec(full, 2, 1024, ckpt=False))),
             Row("mistralai/Mistral-7B-v0.3", tune(spec(lora, 2, 2048, ckpt=False))),
             Row("mistralai/Mistral-7B-v0.3", tune(spec(full, 1, 1024, ckpt=False)))]
    # fms-acceleration's FSDP configurations on their stack, transformers 4.45.2 (benchmarks/legacy_trainer.py, run in
    # .venv-legacy): reentrant checkpointing from outside each layer's unit, SDPA's k and v repeated

    def legacy(t: TrainingSpec) -> TrainingSpec:
        return replace(fsdp(t), transformers_version=LEGACY_TRANSFORMERS)

    rows += [Row("mistralai/Mistral-7B-v0.3", legacy(spec(qlora, 2, 4096, lora_spec=qkvo)), 2),
             Row("mistralai/Mistral-7B-v0.3", legacy(spec(lora, 2, 4096, lora_spec=qkvo)), 2),
             Row("meta-llama/Llama-2-70b-hf", legacy(spec(qlora, 2, 4096, lora_spec=qkvo)), 2)]
    # the executor's ZeRO 1-2 step where the largest gradient's fp64 copy for the norm outgrows the flattened partition
    rows += [Row("meta-llama/Llama-3.2-1B", spec(full, 1, 1024, zero=2), 4)]
    return rows


# Simulated rows that ran for real elsewhere, measured with nvidia-smi (benchmarks/data/public_measurements.csv, by
# row): fms-acceleration's Mistral-7B runs under transformers' Trainer on one A100-80GB (its v0.1; v0.3's vocabulary
# is 768 tokens larger, and v0.1's 4,096-token sliding window, which at 4,096 tokens builds a mask and repeats k and
# v, is not in v0.3), LoRA r16 on q, k, v, o, checkpointing on. Their reserved peak is compared with the replay's.
THIRD_PARTY_RESERVED = {
    "hf-trainer Mistral-7B-v0.3 lora[q_proj,k_proj,v_proj,o_proj] mb4x4096 ckpt sdpa z0 x1": 23,
    "hf-trainer Mistral-7B-v0.3 lora[q_proj,k_proj,v_proj,o_proj] mb8x4096 ckpt sdpa z0 x1": 24,
    "hf-trainer Mistral-7B-v0.3 qlora[q_proj,k_proj,v_proj,o_proj] mb4x4096 ckpt sdpa z0 x1": 26,
    "hf-trainer Mistral-7B-v0.3 qlora[q_proj,k_proj,v_proj,o_proj] mb8x4096 ckpt sdpa z0 x1": 27,
}
