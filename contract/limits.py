"""The documented range of every number a planner request (or a plan) may carry, and the caps on its strings
and lists. Bounds are generous multiples of the largest real value, so no real request meets them, while every
result the planner computes from values inside them fits its protobuf field. README "Limits" lists them.

Largest real values (from the models' config.json on the Hugging Face Hub, read 2026-11): layers 126,
hidden 16,384, intermediate 53,248, heads 128 (Llama-3.1-405B); vocabulary 262,144 (Gemma 3); head_dim 256
(Gemma 2); experts 256 (DeepSeek-V3); context 10,485,760 (Llama 4 Scout). Hardware: 288 GB per GPU (B300),
16 GPUs in one host (HGX-2), NVLink 5 at 1.8 TB/s (NVIDIA spec sheets, read 2026-11).
"""

from __future__ import annotations

from common.bounds import Bounds, Range

_ARCH = "beyond any published architecture"
_HW = "beyond any shipping hardware"
# Candidates one Recommend returns: at least every hardware option of the catalog (152 in 2026-11), so a client
# can always ask for all of them; a test holds the catalog to it.
MAX_RECOMMEND_LIMIT = 256
# Tokens in one micro-batch on one GPU (micro_batch_size × sequence_length): 16 Mi, 16× the longest real step.
MAX_TOKENS_PER_MICRO_BATCH = 2 ** 24
# Parameters a model may have: 10^15, 500× the largest published model.
MAX_PARAMETERS = 10 ** 15
# Tokens a whole job may train on: 10^17, thousands of times any published pretraining run (36 × 10^12, Qwen3).
MAX_TRAINING_TOKENS = 10 ** 17
CONFIG_JSON_CHARS = 1024 * 1024
CONFIG_JSON_DEPTH = 32
DEEPSPEED_JSON_CHARS = 64 * 1024
PATH_CHARS = 4096  # Linux PATH_MAX
NAME_BYTES = 255  # Linux NAME_MAX: the bytes of one file or folder name (ext4, xfs, most filesystems)
# One JSONL record of a dataset: a 128k-token chat is ~0.5 MB of text; a longer line is refused while reading,
# before anything is parsed or tokenized.
MAX_RECORD_BYTES = 4 * 1024 * 1024
# The most re-plans a plan may allow after running out of memory (each one a run up to its first step).
MAX_OOM_REPLANS = 16
# A plan the fleet stores (serialized bytes): a real plan is 2-10 KB (its prediction ~1 KB, a config.json up to
# ~8 KB); 64 KiB holds any of them with room, while 10,000 queued jobs stay under 1 GB of Redis.
MAX_STORED_PLAN_BYTES = 64 * 1024

_architecture = {
    "num_layers": Range(0, 1024, _ARCH), "hidden_size": Range(0, 131072, _ARCH),
    "intermediate_size": Range(0, 1048576, _ARCH), "num_attention_heads": Range(0, 1024, _ARCH),
    "num_key_value_heads": Range(0, 1024, _ARCH), "head_dim": Range(0, 1024, _ARCH),
    "vocab_size": Range(0, 4194304, _ARCH), "num_experts": Range(0, 1024, _ARCH),
    "experts_per_token": Range(0, 1024, _ARCH), "max_position_embeddings": Range(0, 2 ** 24, _ARCH),
    "vision.depth": Range(0, 256, _ARCH), "vision.embed_dim": Range(0, 65536, _ARCH),
    "vision.num_heads": Range(0, 1024, _ARCH), "vision.mlp_ratio": Range(0, 64, _ARCH),
    "vision.patch_size": Range(0, 1024, _ARCH), "vision.temporal_patch_size": Range(0, 64, _ARCH),
    "vision.in_channels": Range(0, 64, _ARCH), "vision.spatial_merge_size": Range(0, 64, _ARCH),
    "vision.out_hidden_size": Range(0, 131072, _ARCH), "vision.intermediate_size": Range(0, 1048576, _ARCH),
    "vision.image_size": Range(0, 65536, _ARCH),
    "dense_layers": Range(0, 1024, _ARCH), "dense_intermediate_size": Range(0, 1048576, _ARCH),
    "moe_layer_interval": Range(0, 1024, _ARCH), "nope_layer_interval": Range(0, 1024, _ARCH),
    "attention_chunk_size": Range(0, 16777216, _ARCH),
    "latent_attention.q_lora_rank": Range(0, 131072, _ARCH), "latent_attention.kv_lora_rank": Range(0, 131072, _ARCH),
    "latent_attention.qk_rope_head_dim": Range(0, 1024, _ARCH),
    "latent_attention.qk_nope_head_dim": Range(0, 1024, _ARCH), "latent_attention.v_head_dim": Range(0, 1024, _ARCH),
}
_training = {
    "micro_batch_size": Range(0, 4096), "sequence_length": Range(0, 2 ** 24, "16 Mi tokens"),
    "gradient_accumulation_steps": Range(0, 65536), "image_tokens": Range(0, 2 ** 24),
    "freeze_trainable_layers": Range(0, 1024), "zero_stage": Range(0, 3, "DeepSpeed ZeRO has stages 0-3"),
    "lora.rank": Range(0, 65536), "lora.alpha": Range(0, 1e6), "lora.dropout": Range(0, 1),
    "dpo.beta": Range(0, 1e3), "dpo.label_smoothing": Range(0, 0.5), "dpo.sft_weight": Range(0, 1e3),
}
_hardware = {
    "gpus_per_node": Range(0, 64, _HW), "nodes": Range(0, 8192, _HW),
    "gpu_memory_bytes": Range(0, 2 ** 40, "1 TiB; " + _HW), "host_memory_bytes": Range(0, 2 ** 46, "64 TiB"),
    "hourly_usd_per_gpu": Range(0, 10_000), "interconnect_bandwidth_bytes_per_s": Range(0, 1e14, _HW),
    "inter_node_bandwidth_bytes_per_s": Range(0, 1e14, _HW),
}
_workload = {
    "dataset_tokens": Range(0, 10 ** 15), "epochs": Range(0, 1000), "max_steps": Range(0, 10 ** 9),
}


# An architecture from any source (a config.json is parsed after the request's own bounds were checked).
ARCHITECTURE_RANGES = _architecture


def _under(prefix: str, table: dict[str, Range]) -> dict[str, Range]:
    return {f"{prefix}.{k}": v for k, v in table.items()}


_SHARED_RANGES = {**_under("model.architecture", _architecture), **_under("training", _training),
                  **_under("hardware", _hardware), **_under("workload", _workload)}
_SHARED_STRINGS = {"model.config_json": CONFIG_JSON_CHARS, "model.weights": PATH_CHARS}
_SHARED_LISTS = {"training.lora.target_modules": 32}

# Every planner request: FitRequest, EstimateRequest, RecommendRequest, List*.
REQUEST_BOUNDS = Bounds(
    ranges={**_SHARED_RANGES, "constraints.max_cost_usd": Range(0, 1e12),
            "constraints.max_duration_s": Range(0, 1e10), "constraints.max_gpus": Range(0, 65536),
            "limit": Range(0, MAX_RECOMMEND_LIMIT, "more than the catalog has")},
    string_chars={**_SHARED_STRINGS, "dataset.local_path": PATH_CHARS},
    list_items={**_SHARED_LISTS, "constraints.allowed_methods": 8})

# A Plan (a plan file, or the plan inside an executor SubmitRequest).
PLAN_BOUNDS = Bounds(
    ranges={**_SHARED_RANGES, "hyperparameters.learning_rate": Range(0, 10),
            "hyperparameters.weight_decay": Range(0, 10), "hyperparameters.warmup_ratio": Range(0, 1),
            "hyperparameters.max_grad_norm": Range(0, 1e6),
            "hyperparameters.checkpoint_every_steps": Range(0, 10 ** 9),
            "on_oom.max_replans": Range(0, MAX_OOM_REPLANS, "more re-plans than the ladder has rungs")},
    string_chars={**_SHARED_STRINGS, "deepspeed_config_json": DEEPSPEED_JSON_CHARS, "output_uri": PATH_CHARS,
                  "dataset.local_path": PATH_CHARS, "prediction": 4096},
    # The planner's own prediction travels with the plan (its notes, suggestions and catalog sources).
    list_items={**_SHARED_LISTS, "prediction": 256, "on_oom.moves": 16})
