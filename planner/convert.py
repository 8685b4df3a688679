"""Protobuf <-> domain conversion for the planner. Defaults are filled here, once."""

from __future__ import annotations

from dataclasses import replace

from tunefleet.v1 import hardware_pb2, model_pb2, plan_pb2, planner_pb2, training_pb2

from common.bounds import echo
from common.errors import FieldError
from contract.enums import from_proto, proto_table
from contract.errors import InvalidFieldError
from contract.limits import ARCHITECTURE_RANGES, MAX_PARAMETERS
from contract.model import Architecture, Family, LatentAttention, ModelSpec, VisionTower
from contract.schema import Attention, Flavor, GpuSpec, Hardware, Interconnect, Method, TrainingSpec, Workload
from contract.training import METHOD, training_to_proto
from planner.architecture import parameter_counts
from planner.catalog import Catalog, did_you_mean
from planner.errors import UnknownNameError, UnsupportedError
from planner.estimate import Estimate
from planner.fit import FitResult
from planner.hf_config import read_config
from planner.search import Constraints, RankBy, Recommendation, Rejected

FAMILY = proto_table(Family, model_pb2.ModelFamily, "MODEL_FAMILY_")
INTERCONNECT = proto_table(Interconnect, hardware_pb2.Interconnect, "INTERCONNECT_")
RANK_BY = proto_table(RankBy, planner_pb2.RankBy, "RANK_BY_")
REJECTED = proto_table(Rejected, planner_pb2.RejectionReason, "REJECTION_REASON_")


# --- Model ------------------------------------------------------------------------------------

def _architecture_from_proto(p: model_pb2.Architecture) -> Architecture:
    family = from_proto(FAMILY, p.family, None, "model.architecture.family")
    if family is None:
        raise InvalidFieldError("model.architecture.family", "set the model family (llama, qwen2, ...)")
    vision = None
    if p.HasField("vision"):
        v = p.vision
        vision = VisionTower(v.depth, v.embed_dim, v.num_heads, v.mlp_ratio, v.patch_size, v.temporal_patch_size,
                             v.in_channels, v.spatial_merge_size, v.out_hidden_size, v.intermediate_size,
                             v.image_size)
    latent = None
    if p.HasField("latent_attention"):
        m = p.latent_attention
        latent = LatentAttention(m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim)
    return Architecture(
        family=family, num_layers=p.num_layers, hidden_size=p.hidden_size,  # type: ignore[arg-type]
        intermediate_size=p.intermediate_size, num_attention_heads=p.num_attention_heads,
        num_key_value_heads=p.num_key_value_heads or p.num_attention_heads, vocab_size=p.vocab_size,
        head_dim=p.head_dim, tie_word_embeddings=p.tie_word_embeddings, attention_bias=p.attention_bias,
        mlp_bias=p.mlp_bias, num_experts=p.num_experts, experts_per_token=p.experts_per_token,
        max_position_embeddings=p.max_position_embeddings, vision=vision, rotary_dims=p.rotary_dims,
        residual_dropout=round(p.residual_dropout, 6),
        shared_expert_intermediate_size=p.shared_expert_intermediate_size,
        attention_dropout=round(p.attention_dropout, 6), embedding_dropout=round(p.embedding_dropout, 6),
        latent_attention=latent, dense_layers=p.dense_layers, dense_intermediate_size=p.dense_intermediate_size,
        qk_norm=p.qk_norm, group_limited_routing=p.group_limited_routing, moe_layer_interval=p.moe_layer_interval,
        nope_layer_interval=p.nope_layer_interval, attention_chunk_size=p.attention_chunk_size,
    )


def _check_ranges(a: Architecture, field: str) -> None:
    for name, bound in ARCHITECTURE_RANGES.items():
        part, _, leaf = name.rpartition(".")
        holder = getattr(a, part) if part else a
        if holder is None:
            continue
        try:
            bound.check(name, getattr(holder, leaf))
        except FieldError as e:
            raise InvalidFieldError(field, f"'{name}' {e.description}") from e


def model_from_proto(p: model_pb2.ModelRef, catalog: Catalog) -> ModelSpec:
    source = p.WhichOneof("source")
    if source == "catalog_name":
        spec = catalog.model(p.catalog_name)
        return ModelSpec(spec.name, spec.architecture, p.weights or spec.weights, spec.source)
    if source == "architecture":
        spec = ModelSpec("custom", _architecture_from_proto(p.architecture), p.weights, "inline architecture")
    elif source == "config_json":
        try:
            architecture, note = read_config(p.config_json)
        except InvalidFieldError as e:  # a shape check names the Architecture field; the client sent config.json
            if e.field == "model.config_json":
                raise
            raise InvalidFieldError("model.config_json", f"'{e.field.removeprefix('model.architecture.')}' "
                                                         f"{e.description}") from e
        spec = ModelSpec(p.weights or "config.json", architecture, p.weights, "config.json", note)
    else:
        raise InvalidFieldError("model", "set one of catalog_name, architecture or config_json")
    _check_ranges(spec.architecture, f"model.{source}")
    total = parameter_counts(spec.architecture).total
    if total > MAX_PARAMETERS:
        raise InvalidFieldError(f"model.{source}", f"describes {total:.3g} parameters, more than the "
                                                   f"{MAX_PARAMETERS:.0e} the planner accepts; check the shapes")
    return spec


def architecture_to_proto(a: Architecture) -> model_pb2.Architecture:
    p = model_pb2.Architecture(
        family=FAMILY[a.family], num_layers=a.num_layers, hidden_size=a.hidden_size,
        intermediate_size=a.intermediate_size, num_attention_heads=a.num_attention_heads,
        num_key_value_heads=a.num_key_value_heads, head_dim=a.head_dim, vocab_size=a.vocab_size,
        tie_word_embeddings=a.tie_word_embeddings, attention_bias=a.attention_bias, mlp_bias=a.mlp_bias,
        num_experts=a.num_experts, experts_per_token=a.experts_per_token,
        max_position_embeddings=a.max_position_embeddings, rotary_dims=a.rotary_dims,
        residual_dropout=a.residual_dropout, shared_expert_intermediate_size=a.shared_expert_intermediate_size,
        attention_dropout=a.attention_dropout, embedding_dropout=a.embedding_dropout, dense_layers=a.dense_layers,
        dense_intermediate_size=a.dense_intermediate_size, qk_norm=a.qk_norm,
        group_limited_routing=a.group_limited_routing, moe_layer_interval=a.moe_layer_interval,
        nope_layer_interval=a.nope_layer_interval, attention_chunk_size=a.attention_chunk_size)
    if a.latent_attention:
        m = a.latent_attention
        p.latent_attention.CopyFrom(model_pb2.LatentAttention(
            q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank, qk_rope_head_dim=m.qk_rope_head_dim,
            qk_nope_head_dim=m.qk_nope_head_dim, v_head_dim=m.v_head_dim))
    if a.vision:
        v = a.vision
        p.vision.CopyFrom(model_pb2.VisionTower(
            depth=v.depth, embed_dim=v.embed_dim, num_heads=v.num_heads, mlp_ratio=v.mlp_ratio,
            patch_size=v.patch_size, temporal_patch_size=v.temporal_patch_size, in_channels=v.in_channels,
            spatial_merge_size=v.spatial_merge_size, out_hidden_size=v.out_hidden_size,
            intermediate_size=v.intermediate_size, image_size=v.image_size))
    return p


def model_info_to_proto(m: ModelSpec) -> model_pb2.ModelInfo:
    counts = parameter_counts(m.architecture)
    return model_pb2.ModelInfo(name=m.name, architecture=architecture_to_proto(m.architecture),
                               parameter_count=counts.total, active_parameter_count=counts.active,
                               vision_parameter_count=counts.vision, source=m.source)


# --- Training ---------------------------------------------------------------------------------

# Attention implementations transformers 5 lacks for a family (its modeling file: _supports_sdpa = False), which the
# executor would refuse at load (executor.training.model.check_attention)
_UNSUPPORTED_ATTENTION = {
    (Family.GPT_OSS, Attention.SDPA): "transformers 5 has no SDPA for gpt-oss's attention sinks",
    (Family.GPT_OSS, Attention.FLASH): "flash-attention 2 drops gpt-oss's attention sinks",
    (Family.GEMMA2, Attention.SDPA): "transformers 5 has no SDPA for Gemma 2's attention soft-capping",
}


def _check_llama4(a: Architecture, t: TrainingSpec) -> None:
    """What of Llama 4 is not modelled, named: eager attention (its softmax in the activations' dtype) and sequences
    as long as its attention chunks, where transformers builds a chunked mask for the RoPE layers."""
    if t.attention is Attention.EAGER:
        raise UnsupportedError("training.attention", "Llama 4 under eager attention (its softmax in the activations' "
                                                     "dtype) is not modelled; plan it with sdpa (--attention sdpa)")
    if a.attention_chunk_size and t.sequence_length >= a.attention_chunk_size:
        raise UnsupportedError("training.sequence_length",
                               f"Llama 4's RoPE layers attend within chunks of {a.attention_chunk_size:,} tokens; at "
                               f"{t.sequence_length:,} tokens transformers masks them chunk by chunk, which is not "
                               f"modelled: plan sequences of at most {a.attention_chunk_size - 1:,} tokens")


def validate_against_model(t: TrainingSpec, m: ModelSpec) -> None:
    a = m.architecture
    if t.method.uses_adapters and t.lora.rank > a.hidden_size:
        raise InvalidFieldError("training.lora.rank",
                                f"rank {t.lora.rank} is larger than the hidden size {a.hidden_size}; "
                                "a LoRA rank above the layer width adds nothing — use 8 to 64")
    if t.method is Method.FREEZE and t.freeze_trainable_layers > a.num_layers:
        raise InvalidFieldError("training.freeze_trainable_layers",
                                f"the model has {a.num_layers} layers, asked to train {t.freeze_trainable_layers}")
    refused = _UNSUPPORTED_ATTENTION.get((a.family, t.attention))
    if refused:
        raise UnsupportedError("training.attention", f"{refused}; set attention eager (--attention eager)")
    if a.family is Family.LLAMA4:
        _check_llama4(a, t)
    if (t.image_tokens or t.train_vision_tower) and a.vision is None:
        raise InvalidFieldError("training.image_tokens", f"{echo(m.name)} has no vision tower")
    if a.max_position_embeddings and t.sequence_length > a.max_position_embeddings:
        raise InvalidFieldError("training.sequence_length",
                                f"{t.sequence_length:,} tokens is longer than the model's context "
                                f"({a.max_position_embeddings:,} max_position_embeddings); shorten it, or plan a "
                                "context extension by giving a config.json with the extended "
                                "max_position_embeddings")


def workload_from_proto(p: training_pb2.WorkloadSpec) -> Workload:
    return Workload(dataset_tokens=p.dataset_tokens, epochs=p.epochs or 1.0, max_steps=p.max_steps)


# --- Hardware ---------------------------------------------------------------------------------

def _flavor_hardware(p: hardware_pb2.HardwareSpec, catalog: Catalog) -> tuple[GpuSpec, Flavor]:
    flavor = catalog.flavor(p.flavor)
    if flavor.accelerator != "gpu":
        raise UnsupportedError("hardware.flavor",
                               f"'{flavor.name}' has no GPU ({flavor.accelerator.upper()}): tunefleet plans "
                               "DeepSpeed training on CUDA/ROCm GPUs; choose a GPU flavor such as a10g-large")
    return catalog.gpu(flavor.gpu), flavor


def hardware_from_proto(p: hardware_pb2.HardwareSpec, catalog: Catalog) -> Hardware:
    if not p.gpu and not p.flavor:
        raise InvalidFieldError("hardware.gpu", "name a GPU class (e.g. a100-80gb) or a flavor (e.g. a10g-large)")
    flavor = None
    if p.flavor:
        gpu, flavor = _flavor_hardware(p, catalog)
        if p.gpu and catalog.gpu(p.gpu).name != gpu.name:
            raise InvalidFieldError("hardware.gpu", f"flavor {flavor.name} carries {gpu.name}, not {p.gpu}")
    else:
        gpu = catalog.gpu(p.gpu)
    for name in ("gpu_memory_bytes", "host_memory_bytes", "interconnect_bandwidth_bytes_per_s",
                 "inter_node_bandwidth_bytes_per_s"):
        if p.HasField(name) and getattr(p, name) <= 0:
            raise InvalidFieldError(f"hardware.{name}", f"must be greater than 0, got {getattr(p, name)}")
    if p.HasField("hourly_usd_per_gpu") and not p.hourly_usd_per_gpu >= 0:
        raise InvalidFieldError("hardware.hourly_usd_per_gpu", f"must be 0 (free) or more, got {p.hourly_usd_per_gpu}")
    if p.HasField("gpu_memory_bytes"):
        gpu = replace(gpu, memory_bytes=p.gpu_memory_bytes)
    if p.HasField("interconnect_bandwidth_bytes_per_s") or p.interconnect:
        gpu = replace(gpu, interconnect=from_proto(INTERCONNECT, p.interconnect, gpu.interconnect,  # type: ignore
                                                     "hardware.interconnect"),
                       interconnect_bandwidth_bytes_per_s=p.interconnect_bandwidth_bytes_per_s
                       if p.HasField("interconnect_bandwidth_bytes_per_s") else gpu.interconnect_bandwidth_bytes_per_s)
    gpus_per_node = p.gpus_per_node or (flavor.gpu_count if flavor else 1)
    if flavor and p.gpus_per_node and p.gpus_per_node != flavor.gpu_count:
        raise InvalidFieldError("hardware.gpus_per_node", f"flavor {flavor.name} has {flavor.gpu_count} GPUs")
    if p.HasField("hourly_usd_per_gpu"):
        price = p.hourly_usd_per_gpu
    elif flavor:
        price = flavor.hourly_usd / flavor.gpu_count
    else:
        price = gpu.spot_hourly_usd if p.spot and gpu.spot_hourly_usd else gpu.on_demand_hourly_usd
    host = p.host_memory_bytes if p.HasField("host_memory_bytes") else (
        flavor.host_memory_bytes if flavor else gpu.host_memory_per_gpu_bytes * gpus_per_node)
    return Hardware(gpu=gpu, gpus_per_node=gpus_per_node, nodes=p.nodes or 1, host_memory_bytes=host,
                    hourly_usd_per_gpu=price, spot=p.spot, provider=p.provider or (flavor.provider if flavor else ""),
                    flavor=flavor.name if flavor else "",
                    inter_node_bandwidth_bytes_per_s=p.inter_node_bandwidth_bytes_per_s,
                    priced=p.HasField("hourly_usd_per_gpu") or price > 0)


def gpu_to_proto(g: GpuSpec) -> hardware_pb2.GpuSpec:
    return hardware_pb2.GpuSpec(
        name=g.name, display_name=g.display_name, vendor=g.vendor, architecture=g.architecture,
        memory_bytes=g.memory_bytes, bf16_flops_per_s=g.bf16_flops_per_s, fp16_flops_per_s=g.fp16_flops_per_s,
        fp32_flops_per_s=g.fp32_flops_per_s, memory_bandwidth_bytes_per_s=g.memory_bandwidth_bytes_per_s,
        interconnect=INTERCONNECT[g.interconnect],
        interconnect_bandwidth_bytes_per_s=g.interconnect_bandwidth_bytes_per_s,
        supports_bf16=g.supports_bf16, on_demand_hourly_usd=g.on_demand_hourly_usd, spot_hourly_usd=g.spot_hourly_usd,
        spec_source=g.spec_source, price_source=g.price_source, aliases=list(g.aliases),
        marketed_memory_bytes=g.marketed_memory_bytes, memory_source=g.memory_source)


def flavor_to_proto(f: Flavor) -> hardware_pb2.Flavor:
    return hardware_pb2.Flavor(name=f.name, provider=f.provider, gpu=f.gpu, gpu_count=f.gpu_count,
                               host_memory_bytes=f.host_memory_bytes, vcpus=f.vcpus, hourly_usd=f.hourly_usd,
                               price_source=f.price_source)


def hardware_to_proto(hw: Hardware) -> hardware_pb2.HardwareSpec:
    return hardware_pb2.HardwareSpec(gpu=hw.gpu.name, flavor=hw.flavor, gpus_per_node=hw.gpus_per_node, nodes=hw.nodes,
                                     host_memory_bytes=hw.host_memory_bytes, hourly_usd_per_gpu=hw.hourly_usd_per_gpu,
                                     spot=hw.spot, provider=hw.provider)


# --- Results ----------------------------------------------------------------------------------

def fit_to_proto(r: FitResult) -> plan_pb2.FitResult:
    g, h = r.per_gpu, r.host
    hw = r.hardware
    return plan_pb2.FitResult(
        fits=r.fits, capacity_bytes=r.capacity_bytes, headroom_bytes=r.headroom_bytes,
        max_micro_batch=r.max_micro_batch, trainable_parameter_count=r.trainable_parameters,
        total_low_bytes=r.band.low_bytes, total_high_bytes=r.band.high_bytes, band_basis=r.band.basis, tight=r.tight,
        margin_fraction=r.margin_fraction, inference=r.inference, fit_probability=r.fit_probability or 0.0,
        calibrated=r.fit_probability is not None,
        per_gpu=plan_pb2.MemoryBreakdown(
            weights_bytes=g.weights_bytes, adapter_bytes=g.adapter_bytes, gradients_bytes=g.gradients_bytes,
            optimizer_bytes=g.optimizer_bytes, activations_bytes=g.activations_bytes, logits_bytes=g.logits_bytes,
            deepspeed_buffers_bytes=g.deepspeed_buffers_bytes, cuda_context_bytes=g.cuda_context_bytes,
            allocator_bytes=g.allocator_bytes, overhead_bytes=g.overhead_bytes, total_bytes=g.total_bytes,
            optimizer_step_bytes=g.optimizer_step_bytes, gathered_parameters_bytes=g.gathered_parameters_bytes,
            regathered_experts_bytes=g.regathered_bytes, cuda_workspace_bytes=g.cuda_workspace_bytes,
            loading_bytes=g.loading_bytes),
        host=plan_pb2.HostMemory(
            offloaded_optimizer_bytes=h.offloaded_optimizer_bytes,
            offloaded_parameters_bytes=h.offloaded_parameters_bytes,
            model_loading_bytes=h.model_loading_bytes, process_bytes=h.process_bytes, total_bytes=h.total_bytes,
            capacity_bytes=h.capacity_bytes, fits=h.fits),
        suggestions=[plan_pb2.Suggestion(change=s.change, reason=s.reason, per_gpu_total_bytes=s.per_gpu_total_bytes,
                                         fits=s.fits) for s in r.suggestions],
        notes=list(r.notes), model=model_info_to_proto(r.model),
        hardware=plan_pb2.ResolvedHardware(
            gpu=gpu_to_proto(hw.gpu), gpus_per_node=hw.gpus_per_node, nodes=hw.nodes,
            host_memory_bytes=hw.host_memory_bytes, hourly_usd_per_gpu=hw.hourly_usd_per_gpu, spot=hw.spot,
            provider=hw.provider, flavor=hw.flavor,
            inter_node_bandwidth_bytes_per_s=hw.inter_node_bandwidth_bytes_per_s),
        training=training_to_proto(r.training))


def estimate_to_proto(e: Estimate) -> plan_pb2.TimeEstimate:
    s = e.step
    return plan_pb2.TimeEstimate(
        flops_per_token=s.flops_per_token, model_flops_utilization=s.model_flops_utilization,
        compute_time_per_step_s=s.compute_s, communication_time_per_step_s=s.communication_s,
        offload_time_per_step_s=s.offload_s, step_time_s=s.step_s, tokens_per_s=s.tokens_per_s,
        total_steps=e.total_steps, total_tokens=e.total_tokens, duration_s_low=e.duration_s_low,
        duration_s=e.duration_s, duration_s_high=e.duration_s_high, gpu_hours=e.gpu_hours,
        cost_usd_low=e.cost_usd_low, cost_usd=e.cost_usd, cost_usd_high=e.cost_usd_high, hourly_usd=e.hourly_usd,
        priced=e.priced)


def constraints_from_proto(p: planner_pb2.Constraints, catalog: Catalog) -> Constraints:
    gpus = tuple(dict.fromkeys(catalog.gpu(name, f"constraints.allowed_gpus[{i}]").name
                               for i, name in enumerate(p.allowed_gpus)))
    if p.HasField("max_cost_usd") and p.max_cost_usd <= 0:
        raise InvalidFieldError("constraints.max_cost_usd", "must be greater than 0")
    if p.HasField("max_duration_s") and p.max_duration_s <= 0:
        raise InvalidFieldError("constraints.max_duration_s", "must be greater than 0")
    methods = tuple(dict.fromkeys(from_proto(METHOD, m, None, f"constraints.allowed_methods[{i}]")
                                  for i, m in enumerate(p.allowed_methods)))
    providers = catalog.providers()
    for i, name in enumerate(p.allowed_providers):
        if name not in providers:
            raise UnknownNameError(f"constraints.allowed_providers[{i}]",
                                   f"no hardware from provider {echo(name)}.{did_you_mean(name, sorted(providers))} "
                                   f"Providers: {', '.join(sorted(providers))}.")
    return Constraints(
        max_cost_usd=p.max_cost_usd if p.HasField("max_cost_usd") else None,
        max_duration_s=p.max_duration_s if p.HasField("max_duration_s") else None,
        allowed_gpus=gpus, allowed_providers=tuple(dict.fromkeys(p.allowed_providers)), max_gpus=p.max_gpus or 8,
        allow_spot=p.allow_spot, allowed_methods=methods,  # type: ignore[arg-type]
        rank_by=from_proto(RANK_BY, p.rank_by, RankBy.COST, "constraints.rank_by"),  # type: ignore[arg-type]
        allow_tight=p.allow_tight)


def recommendation_to_proto(r: Recommendation) -> planner_pb2.RecommendResponse:
    return planner_pb2.RecommendResponse(
        candidates=[planner_pb2.Candidate(hardware=hardware_to_proto(c.fit.hardware),
                                          training=training_to_proto(c.fit.training), fit=fit_to_proto(c.fit),
                                          estimate=estimate_to_proto(c.estimate), pareto_optimal=c.pareto_optimal)
                    for c in r.candidates],
        rejections=[planner_pb2.Rejection(gpu=x.gpu, gpu_count=x.gpu_count, reason=REJECTED[x.reason], detail=x.detail)
                    for x in r.rejections],
        evaluated_count=r.evaluated)
