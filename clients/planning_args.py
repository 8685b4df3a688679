"""The planner's questions as flags: the options `tunefleet fit`, `estimate` and `recommend` take, and the requests
they build. Shared by the CLI and the dashboard's Plan form (which parses its fields with these same parsers), so
a question asked on a page gets the answer the terminal prints."""

from __future__ import annotations

import argparse
from pathlib import Path

from tunefleet.v1 import hardware_pb2, model_pb2, plan_pb2, planner_pb2, training_pb2

from clients.arguments import (
    BadInputError,
    choice_list,
    count,
    fraction,
    margin,
    model_ref,
    non_negative_float,
    positive_float,
    positive_int,
)
from common.units import GiB
from contract.enums import spellings
from contract.limits import MAX_OOM_REPLANS
from contract.oom import DEFAULT_MAX_REPLANS

# Every choice is spelled as the proto spells it (contract.enums): a value added to a proto enum is a choice here.
METHODS = spellings(training_pb2.Method, "METHOD_")
PRECISIONS = spellings(training_pb2.Precision, "PRECISION_")
OFFLOADS = spellings(training_pb2.Offload, "OFFLOAD_")
OPTIMIZERS = spellings(training_pb2.Optimizer, "OPTIMIZER_")
ATTENTIONS = spellings(training_pb2.Attention, "ATTENTION_")
LOSSES = spellings(training_pb2.Loss, "LOSS_")
RECIPES = spellings(training_pb2.Recipe, "RECIPE_")
SHARDINGS = spellings(training_pb2.Sharding, "SHARDING_")
LOAD_DTYPES = spellings(training_pb2.LoadDtype, "LOAD_DTYPE_")
DATASET_FORMATS = spellings(plan_pb2.DatasetFormat, "DATASET_FORMAT_")
OVERSIZE_IMAGES = spellings(plan_pb2.OversizeImages, "OVERSIZE_IMAGES_")
RANKS = spellings(planner_pb2.RankBy, "RANK_BY_")
OOM_MOVES = spellings(plan_pb2.OomMove, "OOM_MOVE_")


def add_margin_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--margin", type=margin, default=0.0,
                   help="headroom to demand beyond the predicted total, e.g. 10%%: fits only with that much to spare "
                        "(the output also gives the likely range and says 'tight' when the GPU is inside it)")


def add_job_args(p: argparse.ArgumentParser, *, hardware: bool = True) -> None:
    g = p.add_argument_group("model and method")
    g.add_argument("--model", required=True, help="catalog name (see 'tunefleet models'), or a config.json / folder")
    g.add_argument("--method", choices=METHODS, default="lora", help="fine-tuning method (default %(default)s)")
    g.add_argument("--precision", choices=PRECISIONS,
                   help="bf16/fp16: mixed precision with fp32 master weights; bf16-pure: no master copy (not run by "
                        "tunefleet's executor). Default: bf16, or fp16 on GPUs without bf16 (T4, V100, RTX 20xx)")
    g.add_argument("--lora-r", type=positive_int, default=16, help="LoRA rank (default %(default)s)")
    g.add_argument("--lora-alpha", type=positive_float, default=32.0)
    g.add_argument("--lora-dropout", type=fraction, default=0.05, help="in [0, 1) (default %(default)s)")
    g.add_argument("--lora-targets", default="all-linear", help="comma-separated module names, or all-linear")
    g.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    g.add_argument("--dpo", action="store_true", help="DPO objective (chosen + rejected per example)")
    g.add_argument("--dpo-ref-model", action="store_true", help="DPO with a separate reference model copy")
    g.add_argument("--dpo-beta", type=positive_float, help="DPO: pull toward the reference (default 0.1)")
    g.add_argument("--dpo-label-smoothing", type=fraction, default=0.0,
                   help="DPO: probability a preference is flipped (cDPO), below 0.5 (default 0)")
    g.add_argument("--dpo-sft-weight", type=non_negative_float, default=0.0,
                   help="DPO: weight of an SFT term on the chosen responses (default 0)")
    g.add_argument("--dpo-precompute-reference", action="store_true",
                   help="DPO: reference log-probs computed once before training; no reference held while training")
    g.add_argument("--image-tokens", type=int, default=0, help="vision-language: image tokens per example")
    g.add_argument("--train-vision", action="store_true", help="vision-language: train the vision tower too")
    g.add_argument("--freeze-layers", type=int, default=0, help="method freeze: train the last N layers")
    b = p.add_argument_group("batch and memory layout")
    b.add_argument("--micro-batch", type=positive_int, default=1, help="sequences per GPU per step (default 1)")
    b.add_argument("--seq-len", type=positive_int, default=2048, help="tokens per sequence (default 2048)")
    b.add_argument("--grad-accum", type=positive_int, default=1, help="gradient accumulation steps")
    b.add_argument("--zero", type=int, choices=range(4), metavar="{0-3}", help="DeepSpeed ZeRO stage "
                   "(default 0 on one GPU, 2 on several)")
    b.add_argument("--offload", choices=OFFLOADS, default="none", help="DeepSpeed CPU offload")
    b.add_argument("--grad-ckpt", action=argparse.BooleanOptionalAction, default=True,
                   help="gradient checkpointing (default on)")
    b.add_argument("--attention", choices=ATTENTIONS, default="sdpa")
    b.add_argument("--loss", choices=LOSSES, default="standard",
                   help="chunked: your own trainer's fused/chunked cross-entropy (modelled, not simulated; the "
                        "executor computes the standard loss)")
    b.add_argument("--recipe", choices=RECIPES, default="tunefleet",
                   help="the trainer the job runs with: tunefleet (the executor, DeepSpeed + PEFT; the default), "
                        "hf-trainer (transformers' Trainer + PEFT, bf16) or trl-sft (TRL's SFTTrainer with its "
                        "defaults: the fused LM head, no logits), which run on one GPU without DeepSpeed (--zero 0) or "
                        "under DeepSpeed with LLaMA-Factory's configs (--zero 2 or 3, any number of GPUs); trl-dpo "
                        "(TRL's DPOTrainer with --dpo, checkpointing on: one GPU, or --zero 2). The last three are "
                        "planned (simulated at full size) for LoRA, QLoRA and bf16 full fine-tuning, not run by the "
                        "executor. torchtune: its single-device LoRA and full recipes, bf16 throughout (--precision "
                        "bf16-pure, its default there; Llama, Qwen2, Mistral; one GPU; its own chunked loss), planned, "
                        "not run by the executor")
    b.add_argument("--sharding", choices=SHARDINGS, default="deepspeed",
                   help="which library shards --zero: deepspeed (DeepSpeed's ZeRO; the default) or fsdp (PyTorch's "
                        "FSDP through accelerate, with --recipe hf-trainer and --zero 3 read as FULL_SHARD: PEFT's "
                        "example config, one unit a decoder layer, bf16 mixed precision; planned for LoRA, QLoRA "
                        "(4-bit weights stored as bf16, not k-bit prepared) and full fine-tuning on several GPUs, not "
                        "run by the executor)")
    b.add_argument("--load-dtype", choices=LOAD_DTYPES, default="bf16",
                   help="the dtype a Trainer recipe's script loads the model in (from_pretrained(dtype=...)): bf16 "
                        "(the default) or fp32 (PEFT's example scripts, transformers 4 without a dtype); planned "
                        "with --sharding fsdp, whose frozen shards then stay fp32")
    b.add_argument("--liger", action="store_true",
                   help="Liger's Triton kernels, as the Trainer's use_liger_kernel applies them (with --recipe "
                        "hf-trainer or trl-sft): the fused linear cross-entropy (no logits), RMSNorm, SwiGLU and "
                        "RoPE; planned (simulated at full size) for Llama-style models, not run by the executor")
    b.add_argument("--transformers-version", default="", metavar="VERSION",
                   help="the transformers release your Trainer script runs (pip show transformers), e.g. 4.45.2, "
                        "with --recipe hf-trainer, trl-sft or trl-dpo; the default is the release the planner is "
                        "simulated with. Before 4.52 a checkpointed FSDP step holds every recomputed layer's input "
                        "gradient until backward ends, and before 4.54 SDPA copies k and v to every head: the plan "
                        "counts both")
    if hardware:
        h = p.add_argument_group("hardware")
        h.add_argument("--gpu", help="GPU class or alias, e.g. rtx-4090, a100-80gb, h100 (see 'tunefleet hardware')")
        h.add_argument("--flavor", help="provider flavor, e.g. a10g-large, l4x4 (sets GPU, count and price)")
        h.add_argument("--gpus", type=positive_int, help="GPUs per node (default 1, or the flavor's)")
        h.add_argument("--nodes", type=positive_int, default=1)
        h.add_argument("--host-memory-gb", type=positive_float, help="host RAM per node in GiB")
        h.add_argument("--price-per-hour", type=non_negative_float,
                       help="USD per GPU-hour (overrides the catalog; 0 for a free tier)")
        h.add_argument("--spot", action="store_true", help="use spot prices where the catalog has them")


def training_spec(a: argparse.Namespace) -> training_pb2.TrainingSpec:
    t = training_pb2.TrainingSpec(
        method=METHODS[a.method], optimizer=OPTIMIZERS[a.optimizer],
        precision=PRECISIONS[a.precision] if a.precision else training_pb2.PRECISION_UNSPECIFIED,
        offload=OFFLOADS[a.offload], gradient_checkpointing=a.grad_ckpt, attention=ATTENTIONS[a.attention],
        loss=LOSSES[a.loss], recipe=RECIPES[a.recipe], sharding=SHARDINGS[a.sharding],
        load_dtype=LOAD_DTYPES[a.load_dtype], liger=a.liger,
        transformers_version=a.transformers_version,
        micro_batch_size=a.micro_batch, sequence_length=a.seq_len,
        gradient_accumulation_steps=a.grad_accum,
        objective=training_pb2.OBJECTIVE_DPO if a.dpo else training_pb2.OBJECTIVE_SFT,
        dpo_reference_model=a.dpo_ref_model, image_tokens=a.image_tokens, train_vision_tower=a.train_vision,
        freeze_trainable_layers=a.freeze_layers, dpo=_dpo(a),
        lora=training_pb2.LoraSpec(rank=a.lora_r, alpha=a.lora_alpha, dropout=a.lora_dropout,
                                   target_modules=[x.strip() for x in a.lora_targets.split(",") if x.strip()]))
    if a.zero is not None:
        t.zero_stage = a.zero
    return t


def _dpo(a: argparse.Namespace) -> training_pb2.DpoSpec | None:
    knobs = a.dpo_beta is not None or a.dpo_label_smoothing or a.dpo_sft_weight or a.dpo_precompute_reference
    if knobs and not a.dpo:
        raise BadInputError("--dpo-beta, --dpo-label-smoothing, --dpo-sft-weight and --dpo-precompute-reference "
                         "are DPO knobs: add --dpo")
    if not a.dpo:
        return None
    d = training_pb2.DpoSpec(label_smoothing=a.dpo_label_smoothing, sft_weight=a.dpo_sft_weight,
                             precompute_reference=a.dpo_precompute_reference)
    if a.dpo_beta is not None:
        d.beta = a.dpo_beta
    return d


def hardware_spec(a: argparse.Namespace) -> hardware_pb2.HardwareSpec:
    if not a.gpu and not a.flavor:
        raise BadInputError("name the hardware with --gpu (e.g. --gpu rtx-4090) or --flavor (e.g. a10g-large)")
    h = hardware_pb2.HardwareSpec(gpu=a.gpu or "", flavor=a.flavor or "", gpus_per_node=a.gpus or 0, nodes=a.nodes,
                                  spot=a.spot)
    if a.host_memory_gb:
        h.host_memory_bytes = int(a.host_memory_gb * GiB)
    if a.price_per_hour is not None:
        h.hourly_usd_per_gpu = a.price_per_hour
    return h


def workload_spec(a: argparse.Namespace) -> training_pb2.WorkloadSpec:
    if not a.tokens and not a.max_steps:
        raise BadInputError("say how much data: --tokens 10M (with --epochs) or --max-steps N")
    return training_pb2.WorkloadSpec(dataset_tokens=a.tokens or 0, epochs=a.epochs, max_steps=a.max_steps or 0)


def add_workload_args(p: argparse.ArgumentParser) -> None:
    w = p.add_argument_group("workload")
    w.add_argument("--tokens", type=count, help="training tokens per epoch, e.g. 10M")
    w.add_argument("--epochs", type=positive_float, default=1.0)
    w.add_argument("--max-steps", type=positive_int, help="optimizer steps (overrides --tokens)")


def add_recommend_args(rec: argparse.ArgumentParser) -> None:
    """recommend's plan and constraints flags."""
    d = rec.add_argument_group("plan")
    d.add_argument("--dataset", help="training data for the plan: a JSONL file, or a Hugging Face dataset name")
    d.add_argument("--dataset-format", choices=DATASET_FORMATS, default="text",
                   help="text {'text'}, instruction {'instruction','response'}, chat {'messages'}, preference "
                        "{'prompt','chosen','rejected'} for --dpo (default text)")
    d.add_argument("--oversize-images", choices=OVERSIZE_IMAGES, default="resize",
                   help="vision-language: an image over --image-tokens is scaled down, or refused (default resize)")
    d.add_argument("--packing", action="store_true", help="pack examples into full-length sequences")
    d.add_argument("--on-oom", type=choice_list(OOM_MOVES, "move"), metavar="MOVES",
                   help="what a fleet worker may change when the run runs out of GPU memory, cheapest first: "
                        f"{', '.join(OOM_MOVES)} (default: the first four, which keep the training as planned)")
    d.add_argument("--max-replans", type=positive_int,
                   help=f"re-plans after out-of-memory before the job fails (default {DEFAULT_MAX_REPLANS}, "
                        f"at most {MAX_OOM_REPLANS})")
    d.add_argument("--no-replan", action="store_true",
                   help="fail at the first out-of-memory instead of re-planning")
    d.add_argument("--deterministic", action="store_true",
                   help="bitwise-reproducible GPU kernels (slower backward; a resume then matches an uninterrupted run "
                        "bit for bit on a GPU too)")
    d.add_argument("--save-plan", type=Path, metavar="FILE",
                   help="write the best option as an executable plan (JSON) for 'tunefleet train FILE'")
    r = rec.add_argument_group("constraints")
    r.add_argument("--budget", type=positive_float, help="most USD to spend")
    r.add_argument("--deadline-hours", type=positive_float, help="latest finish, in hours of wall time")
    r.add_argument("--allow-gpu", action="append", default=[], help="only these GPU classes (repeatable)")
    r.add_argument("--provider", action="append", default=[], help="only these providers (repeatable)")
    r.add_argument("--max-gpus", type=positive_int, default=8)
    r.add_argument("--methods", type=choice_list(METHODS, "method"), default=[],
                   help="methods the search may switch to, e.g. lora,qlora")
    r.add_argument("--rank-by", choices=RANKS, default="cost")
    r.add_argument("--allow-tight", action="store_true",
                   help="rank tight options (their likely peak passes the GPU's memory) with the others; by default "
                        "every safe option ranks first")
    r.add_argument("--spot", action="store_true", help="allow spot prices")
    r.add_argument("--limit", type=positive_int, default=10)


def oom_policy(a: argparse.Namespace) -> plan_pb2.OomPolicy:
    if a.max_replans is not None and a.max_replans > MAX_OOM_REPLANS:
        raise BadInputError(f"--max-replans: at most {MAX_OOM_REPLANS}, got {a.max_replans}")
    return plan_pb2.OomPolicy(moves=a.on_oom or [], max_replans=a.max_replans or 0, disabled=a.no_replan)


def recommend_request(a: argparse.Namespace, local_files: bool = True) -> planner_pb2.RecommendRequest:
    """The RecommendRequest `tunefleet recommend` sends for these flags; `local_files` False (a server such as the
    dashboard asking for someone else) reads no file of this host: the model is a catalog name, the dataset a path
    on the fleet's storage, unchecked."""
    constraints = planner_pb2.Constraints(
        allowed_gpus=a.allow_gpu, allowed_providers=a.provider, max_gpus=a.max_gpus, allow_spot=a.spot,
        rank_by=RANKS[a.rank_by], allowed_methods=a.methods, allow_tight=a.allow_tight)
    if a.budget:
        constraints.max_cost_usd = a.budget
    if a.deadline_hours:
        constraints.max_duration_s = a.deadline_hours * 3600
    return planner_pb2.RecommendRequest(model=_model(a.model, local_files), training=training_spec(a),
                                        workload=workload_spec(a), constraints=constraints, limit=a.limit,
                                        dataset=dataset_ref(a, local_files))


def _model(text: str, local_files: bool) -> model_pb2.ModelRef:
    return model_ref(text) if local_files else model_pb2.ModelRef(catalog_name=text)


def fit_request(a: argparse.Namespace, local_files: bool = True) -> planner_pb2.FitRequest:
    """The FitRequest `tunefleet fit` sends for these flags (`local_files`: as recommend_request)."""
    inference = planner_pb2.InferenceSpec(batch_size=a.micro_batch, context_tokens=a.seq_len) \
        if a.inference else None
    return planner_pb2.FitRequest(model=_model(a.model, local_files), training=training_spec(a),
                                  hardware=hardware_spec(a), margin_fraction=a.margin, inference=inference)


def dataset_ref(a: argparse.Namespace, local_files: bool = True) -> plan_pb2.DatasetRef:
    ref = plan_pb2.DatasetRef(format=DATASET_FORMATS[a.dataset_format], packing=a.packing,
                              oversize_images=OVERSIZE_IMAGES[a.oversize_images])
    if not local_files:
        if a.dataset and (a.dataset.startswith("/") or Path(a.dataset).suffix in (".jsonl", ".json")):
            ref.local_path = a.dataset
        elif a.dataset:
            ref.hub_name = a.dataset
        return ref
    if a.dataset and Path(a.dataset).suffix in (".jsonl", ".json") or a.dataset and Path(a.dataset).exists():
        ref.local_path = str(Path(a.dataset).resolve())
    elif a.dataset:
        ref.hub_name = a.dataset
    return ref


def form_parser(command: str, parser_class: type[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """`fit` or `recommend`'s planning flags alone (no output or server flags), for a caller that is not a terminal:
    `parser_class` raises on a bad value instead of exiting."""
    p = parser_class(prog=f"tunefleet {command}")
    add_job_args(p, hardware=command == "fit")
    if command == "fit":
        add_margin_arg(p)
        p.add_argument("--inference", action="store_true")
    else:
        add_workload_args(p)
        add_recommend_args(p)
    return p
