"""A Hugging Face config.json read into an Architecture (strictly typed, bounded, every failure naming the key), and
the config.json an Architecture stands for."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.bounds import echo
from common.strict_json import loads_object
from contract.errors import InvalidFieldError
from contract.limits import CONFIG_JSON_CHARS, CONFIG_JSON_DEPTH
from contract.model import Architecture, Family, LatentAttention, VisionTower
from planner.errors import UnsupportedError

_FAMILY_BY_MODEL_TYPE = {
    "llama": Family.LLAMA, "mistral": Family.MISTRAL, "mixtral": Family.MIXTRAL,
    "qwen2": Family.QWEN2, "qwen2_vl": Family.QWEN2_VL, "gemma": Family.GEMMA,
    "gemma2": Family.GEMMA2, "phi3": Family.PHI3, "gpt2": Family.GPT2, "qwen3": Family.QWEN3,
    # the Llama layout exactly (SmolLM3 leaves RoPE out of some layers: the same tensors are saved)
    "smollm3": Family.LLAMA,
    "olmo2": Family.OLMO2, "qwen3_moe": Family.QWEN3_MOE, "gemma3_text": Family.GEMMA3, "phi": Family.PHI,
    "qwen2_moe": Family.QWEN2_MOE, "starcoder2": Family.STARCODER2,
    # Kimi-K2 ships DeepSeek-V3's layout under its own model_type (its config.json: DeepseekV3ForCausalLM)
    "deepseek_v3": Family.DEEPSEEK_V3, "kimi_k2": Family.DEEPSEEK_V3, "glm4_moe": Family.GLM4_MOE,
    "deepseek_v2": Family.DEEPSEEK_V2, "gpt_oss": Family.GPT_OSS, "qwen2_5_vl": Family.QWEN2_5_VL,
    # Gemma 3's image-text models: the gemma3_text layout with a SigLIP encoder (text_config, vision_config)
    "gemma3": Family.GEMMA3,
    # Llama 4's language model; its image-text checkpoints (llama4) carry it as text_config
    "llama4_text": Family.LLAMA4, "llama4": Family.LLAMA4,
}


def config_json(a: Architecture) -> dict[str, Any]:
    """The config.json an Architecture stands for (transformers' keys and model_type): what
    architecture_from_config reads back, and what benchmarks/simulate.py builds a model from."""
    if a.family is Family.GPT2:
        return {"model_type": "gpt2", "n_embd": a.hidden_size, "n_layer": a.num_layers,
                "n_head": a.num_attention_heads, "vocab_size": a.vocab_size, "n_positions": a.max_position_embeddings}
    text: dict[str, Any] = {
        "num_hidden_layers": a.num_layers, "hidden_size": a.hidden_size, "intermediate_size": a.intermediate_size,
        "num_attention_heads": a.num_attention_heads, "num_key_value_heads": a.num_key_value_heads,
        "vocab_size": a.vocab_size, "tie_word_embeddings": a.tie_word_embeddings}
    if a.head_dim:
        text["head_dim"] = a.head_dim
    if a.max_position_embeddings:
        text["max_position_embeddings"] = a.max_position_embeddings
    if a.family is Family.MISTRAL:
        # attention over the whole sequence, as Mistral's v0.2 and later configs ship (sliding_window null) and the
        # planner models it; transformers' MistralConfig would otherwise default to v0.1's 4,096-token window
        text["sliding_window"] = None
    if a.family is Family.STARCODER2:
        text.update(use_bias=a.attention_bias, residual_dropout=a.residual_dropout,
                    attention_dropout=a.attention_dropout, embedding_dropout=a.embedding_dropout)
    if a.family is Family.PHI:
        text.update(partial_rotary_factor=a.resolved_rotary_dims / a.resolved_head_dim,
                    resid_pdrop=a.residual_dropout)
    if a.family in (Family.DEEPSEEK_V2, Family.DEEPSEEK_V3):
        m = a.latent_attention
        assert m is not None
        text.update(q_lora_rank=m.q_lora_rank or None, kv_lora_rank=m.kv_lora_rank,
                    qk_rope_head_dim=m.qk_rope_head_dim, qk_nope_head_dim=m.qk_nope_head_dim, v_head_dim=m.v_head_dim,
                    **_shared_experts_keys(a))
        if a.family is Family.DEEPSEEK_V2:  # its router does not normalise; group-limited over 2 groups or greedy
            text.update(norm_topk_prob=False, topk_method="group_limited_greedy" if a.group_limited_routing else
                        "greedy", n_group=2 if a.group_limited_routing else None)
        del text["head_dim"]  # transformers derives it (qk_rope_head_dim); the config's head_dim is not the query's
        return {"model_type": a.family.value, **text}
    if a.family is Family.GLM4_MOE:
        text.update(**_shared_experts_keys(a), attention_bias=a.attention_bias, use_qk_norm=a.qk_norm,
                    partial_rotary_factor=a.resolved_rotary_dims / a.resolved_head_dim)
        return {"model_type": a.family.value, **text}
    if a.family is Family.GPT_OSS:  # its attention biased; sliding-window layers alternate with full ones
        text.update(num_local_experts=a.num_experts, num_experts_per_tok=a.experts_per_token,
                    attention_bias=a.attention_bias)
        return {"model_type": a.family.value, **text}
    if a.family is Family.LLAMA4:
        text.update(num_local_experts=a.num_experts, num_experts_per_tok=a.experts_per_token,
                    interleave_moe_layer_step=a.moe_layer_interval or 1, use_qk_norm=a.qk_norm,
                    no_rope_layer_interval=a.nope_layer_interval, attention_chunk_size=a.attention_chunk_size or None,
                    attention_bias=a.attention_bias)
        if a.dense_layers:
            text["intermediate_size_mlp"] = a.dense_intermediate_size
        return {"model_type": a.family.value, **text}
    if a.family in (Family.QWEN3_MOE, Family.QWEN2_MOE):
        # every layer sparse, the routing weights normalised as each ships (Qwen3-MoE yes, Qwen2-MoE no)
        text.update(num_experts=a.num_experts, num_experts_per_tok=a.experts_per_token,
                    moe_intermediate_size=a.intermediate_size, norm_topk_prob=a.family is Family.QWEN3_MOE,
                    decoder_sparse_step=1, mlp_only_layers=[])
        if a.family is Family.QWEN2_MOE:
            text.update(shared_expert_intermediate_size=a.shared_expert_intermediate_size)
    elif a.num_experts:
        text.update(num_local_experts=a.num_experts, num_experts_per_tok=a.experts_per_token)
    if a.vision is not None and a.vision.image_size:  # Gemma 3: a SigLIP encoder without its pooling head
        v = a.vision
        tokens_per_side = v.image_size // v.patch_size // v.spatial_merge_size
        return {"model_type": "gemma3", "tie_word_embeddings": a.tie_word_embeddings, "text_config": text,
                "mm_tokens_per_image": tokens_per_side ** 2,
                "vision_config": {"model_type": "siglip_vision_model", "hidden_size": v.embed_dim,
                                  "intermediate_size": v.intermediate_size, "num_hidden_layers": v.depth,
                                  "num_attention_heads": v.num_heads, "num_channels": v.in_channels,
                                  "image_size": v.image_size, "patch_size": v.patch_size, "vision_use_head": False}}
    if a.vision is not None and a.family is Family.QWEN2_5_VL:  # its vision_config's hidden_size is the tower's
        v = a.vision
        return {"model_type": a.family.value, "tie_word_embeddings": a.tie_word_embeddings, "text_config": text,
                "vision_config": {"depth": v.depth, "hidden_size": v.embed_dim, "num_heads": v.num_heads,
                                  "intermediate_size": v.intermediate_size, "out_hidden_size": v.out_hidden_size,
                                  "in_channels": v.in_channels, "patch_size": v.patch_size,
                                  "spatial_merge_size": v.spatial_merge_size,
                                  "temporal_patch_size": v.temporal_patch_size}}
    if a.vision is not None:
        v = a.vision
        return {"model_type": a.family.value, "tie_word_embeddings": a.tie_word_embeddings, "text_config": text,
                "vision_config": {"depth": v.depth, "embed_dim": v.embed_dim, "num_heads": v.num_heads,
                                  "mlp_ratio": v.mlp_ratio, "hidden_size": v.out_hidden_size,
                                  "in_chans": v.in_channels, "patch_size": v.patch_size,
                                  "spatial_merge_size": v.spatial_merge_size,
                                  "temporal_patch_size": v.temporal_patch_size}}
    return {"model_type": a.family.value, **text}


def _shared_experts_keys(a: Architecture) -> dict[str, Any]:
    """DeepSeek-V3's mixture-of-experts keys (GLM-4.5 and DeepSeek-V2 share them), one expert group."""
    return dict(n_routed_experts=a.num_experts, num_experts_per_tok=a.experts_per_token,
                moe_intermediate_size=a.intermediate_size, intermediate_size=a.dense_intermediate_size,
                n_shared_experts=a.shared_expert_intermediate_size // a.intermediate_size,
                first_k_dense_replace=a.dense_layers, norm_topk_prob=True, n_group=1, topk_group=1)


_CONFIG = "model.config_json"


def _int(cfg: Mapping[str, Any], *keys: str, default: int | None = None) -> int:
    """The first of `keys` that is set (not null), as an integer; `default` when none is, else an error."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidFieldError(_CONFIG, f"'{key}' must be an integer, got {echo(value)}")
        if value < 0:
            raise InvalidFieldError(_CONFIG, f"'{key}' must not be negative, got {value}")
        return value
    if default is None:
        raise InvalidFieldError(_CONFIG, f"missing '{keys[0]}'")
    return default


def _bool(cfg: Mapping[str, Any], key: str, default: bool) -> bool:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidFieldError(_CONFIG, f"'{key}' must be true or false, got {echo(value)}")
    return value


def _fraction(cfg: Mapping[str, Any], key: str, default: float) -> float:
    value = cfg.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise InvalidFieldError(_CONFIG, f"'{key}' must be a number in [0, 1], got {echo(value)}")
    return float(value)


def _object(cfg: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = cfg.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidFieldError(_CONFIG, f"'{key}' must be a JSON object, got {echo(value)}")
    return value


# Keys of a config whose layers are not the Llama layout (experts, multi-head latent attention, a vision tower),
# even when its other keys read like one.
_NOT_LLAMA_LAYOUT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "q_lora_rank", "kv_lora_rank",
                          "vision_config", "n_embd", "multi_query", "partial_rotary_factor")
_LLAMA_LAYOUT_KEYS = ("hidden_size", "num_hidden_layers", "intermediate_size", "num_attention_heads", "vocab_size")


def architecture_from_config(text: str) -> Architecture:
    """Parse the text of a Hugging Face config.json into an Architecture: strictly typed, size- and depth-bounded;
    every failure names the key."""
    return read_config(text)[0]


def read_config(text: str) -> tuple[Architecture, str]:
    """The Architecture of a config.json and a note for the answer: a model_type the planner does not model whose
    config follows the Llama layout (the keys of _LLAMA_LAYOUT_KEYS, none of _NOT_LLAMA_LAYOUT_KEYS) is read as
    Llama, and the note says so; any other unknown model_type is refused naming the ones supported."""
    cfg = loads_object(text, _CONFIG, max_chars=CONFIG_JSON_CHARS, max_depth=CONFIG_JSON_DEPTH,
                       error=InvalidFieldError)
    model_type = cfg.get("model_type")
    family = _FAMILY_BY_MODEL_TYPE.get(model_type) if isinstance(model_type, str) else None
    if family is None:
        llama_like = all(isinstance(cfg.get(key), int) for key in _LLAMA_LAYOUT_KEYS) and \
            not any(key in cfg for key in _NOT_LLAMA_LAYOUT_KEYS)
        if not llama_like:
            raise UnsupportedError(_CONFIG, f"model_type {echo(model_type)} is not supported; supported: "
                                            f"{', '.join(sorted(_FAMILY_BY_MODEL_TYPE))}")
        note = (f"model_type {echo(model_type)} is not one the planner models; its config follows the Llama layout, "
                "so it is answered as Llama (norms or biases it adds are not counted): check the parameter count "
                "against the model card")
        return _architecture(cfg, Family.LLAMA), note
    if family is Family.LLAMA4 and "vision_config" in cfg:
        return _architecture(cfg, family), ("Llama 4's vision encoder and projector (vision_config) are not "
                                            "planned: answered for its language model, Llama4ForCausalLM, which "
                                            "loads the checkpoint's text weights")
    return _architecture(cfg, family), ""


def _architecture(cfg: Mapping[str, Any], family: Family) -> Architecture:
    vision = None
    text_cfg: Mapping[str, Any] = cfg
    if family is Family.QWEN2_VL:
        text_cfg = {**cfg, **_object(cfg, "text_config")}
        vc = _object(cfg, "vision_config")
        vision = VisionTower(
            depth=_int(vc, "depth"), embed_dim=_int(vc, "embed_dim"), num_heads=_int(vc, "num_heads"),
            mlp_ratio=_int(vc, "mlp_ratio", default=4), patch_size=_int(vc, "patch_size", "spatial_patch_size"),
            temporal_patch_size=_int(vc, "temporal_patch_size", default=2),
            in_channels=_int(vc, "in_chans", "in_channels", default=3),
            spatial_merge_size=_int(vc, "spatial_merge_size", default=2),
            out_hidden_size=_int(vc, "hidden_size", default=_int(text_cfg, "hidden_size")),
        )
    if family is Family.GEMMA3 and "vision_config" in cfg:
        text_cfg = {**cfg, **_object(cfg, "text_config")}
        vision = _siglip(_object(cfg, "vision_config"), _int(cfg, "mm_tokens_per_image", default=256),
                         _int(text_cfg, "hidden_size"))
    if family is Family.QWEN2_5_VL:  # its vision_config names the tower's width hidden_size, the text's out_hidden_size
        text_cfg = {**cfg, **_object(cfg, "text_config")}
        vc = _object(cfg, "vision_config")
        vision = VisionTower(
            depth=_int(vc, "depth"), embed_dim=_int(vc, "hidden_size"), num_heads=_int(vc, "num_heads"),
            mlp_ratio=4, patch_size=_int(vc, "patch_size", "spatial_patch_size"),
            temporal_patch_size=_int(vc, "temporal_patch_size", default=2),
            in_channels=_int(vc, "in_chans", "in_channels", default=3),
            spatial_merge_size=_int(vc, "spatial_merge_size", default=2),
            out_hidden_size=_int(vc, "out_hidden_size", default=_int(text_cfg, "hidden_size")),
            intermediate_size=_int(vc, "intermediate_size"))
    if family is Family.LLAMA4:
        return _llama4(_object(cfg, "text_config") if "text_config" in cfg else cfg)
    if family is Family.GPT2:
        hidden = _int(cfg, "n_embd")
        return Architecture(
            family=family, num_layers=_int(cfg, "n_layer"), hidden_size=hidden,
            intermediate_size=_int(cfg, "n_inner", default=4 * hidden),
            num_attention_heads=_int(cfg, "n_head"), num_key_value_heads=_int(cfg, "n_head"),
            vocab_size=_int(cfg, "vocab_size"), tie_word_embeddings=_bool(cfg, "tie_word_embeddings", True),
            max_position_embeddings=_int(cfg, "n_positions"),
        )
    heads = _int(text_cfg, "num_attention_heads")
    tie_default = family in (Family.GEMMA, Family.GEMMA2, Family.GEMMA3, Family.STARCODER2)
    rotary_dims, residual_dropout, attention_dropout, embedding_dropout = 0, 0.0, 0.0, 0.0
    if family is Family.PHI:  # transformers' PhiConfig defaults: half of each head turned, no dropout
        rotary_dims = _partial_rotary_dims(text_cfg, heads)
        residual_dropout = _fraction(text_cfg, "resid_pdrop", 0.0)
        if residual_dropout >= 1.0:
            raise InvalidFieldError(_CONFIG, f"'resid_pdrop' must be below 1, got {residual_dropout}")
    use_bias = _bool(text_cfg, "use_bias", True)  # StarCoder2's one switch for every projection's bias
    if family is Family.STARCODER2:  # transformers' Starcoder2Config defaults: no dropout
        residual_dropout = _fraction(text_cfg, "residual_dropout", 0.0)
        attention_dropout = _fraction(text_cfg, "attention_dropout", 0.0)
        embedding_dropout = _fraction(text_cfg, "embedding_dropout", 0.0)
        for key, value in (("residual_dropout", residual_dropout), ("attention_dropout", attention_dropout),
                           ("embedding_dropout", embedding_dropout)):
            if value >= 1.0:
                raise InvalidFieldError(_CONFIG, f"'{key}' must be below 1, got {value}")
    if family in (Family.DEEPSEEK_V2, Family.DEEPSEEK_V3):
        return _deepseek(cfg, family)
    if family is Family.GLM4_MOE:
        return _glm4_moe(cfg)
    intermediate = _int(text_cfg, "intermediate_size")
    shared = 0
    if family is Family.QWEN2_MOE:
        shared = _int(text_cfg, "shared_expert_intermediate_size")
    if family in (Family.QWEN3_MOE, Family.QWEN2_MOE):
        if text_cfg.get("mlp_only_layers") or _int(text_cfg, "decoder_sparse_step", default=1) != 1:
            raise UnsupportedError(_CONFIG, "dense layers among the sparse ones (mlp_only_layers, decoder_sparse_step "
                                            "other than 1) are not modelled; the released Qwen2/3-MoE models are all "
                                            "sparse")
        intermediate = _int(text_cfg, "moe_intermediate_size")
    return Architecture(
        family=family,
        num_layers=_int(text_cfg, "num_hidden_layers"),
        hidden_size=_int(text_cfg, "hidden_size"),
        intermediate_size=intermediate,
        num_attention_heads=heads,
        num_key_value_heads=_int(text_cfg, "num_key_value_heads", default=heads) or heads,
        head_dim=_int(text_cfg, "head_dim", default=0),
        vocab_size=_int(text_cfg, "vocab_size"),
        tie_word_embeddings=_bool(cfg, "tie_word_embeddings", _bool(text_cfg, "tie_word_embeddings", tie_default)),
        attention_bias=use_bias if family is Family.STARCODER2 else _bool(text_cfg, "attention_bias", False),
        # gpt-oss's experts are always biased (transformers' GptOssExperts); its config.json has no key for it
        mlp_bias=use_bias if family is Family.STARCODER2 else family is Family.GPT_OSS or _bool(text_cfg, "mlp_bias",
                                                                                               False),
        num_experts=_int(text_cfg, "num_local_experts", "num_experts", default=0),
        experts_per_token=_int(text_cfg, "num_experts_per_tok", default=0),
        max_position_embeddings=_int(text_cfg, "max_position_embeddings", default=0),
        vision=vision, rotary_dims=rotary_dims, residual_dropout=residual_dropout,
        shared_expert_intermediate_size=shared, attention_dropout=attention_dropout,
        embedding_dropout=embedding_dropout,
    )


def _llama4(cfg: Mapping[str, Any]) -> Architecture:
    """Llama 4's language model (transformers' Llama4TextConfig defaults where a key is absent): every
    interleave_moe_layer_step-th layer sparse (num_local_experts of intermediate_size and a shared expert), the others
    dense MLPs of intermediate_size_mlp; every no_rope_layer_interval-th layer without RoPE. Layer lists that break
    those patterns (moe_layers, no_rope_layers) and temperature tuning turned off are not modelled."""
    layers = _int(cfg, "num_hidden_layers", default=48)
    step, nope = _int(cfg, "interleave_moe_layer_step", default=1), _int(cfg, "no_rope_layer_interval", default=4)
    if cfg.get("moe_layers") not in (None, list(range(step - 1, layers, step))):
        raise UnsupportedError(_CONFIG, "'moe_layers' other than every interleave_moe_layer_step-th layer is not "
                                        "modelled; the released Llama 4 models follow that pattern")
    if cfg.get("no_rope_layers") not in (None, [], [int((i + 1) % nope != 0) for i in range(layers)]):
        raise UnsupportedError(_CONFIG, "'no_rope_layers' other than every no_rope_layer_interval-th layer is not "
                                        "modelled; the released Llama 4 models follow that pattern")
    if not _bool(cfg, "attn_temperature_tuning", True):
        raise UnsupportedError(_CONFIG, "'attn_temperature_tuning' false is not modelled; Llama 4 ships it on")
    heads = _int(cfg, "num_attention_heads", default=40)
    hidden = _int(cfg, "hidden_size", default=5120)
    return Architecture(
        family=Family.LLAMA4, num_layers=layers, hidden_size=hidden,
        intermediate_size=_int(cfg, "intermediate_size", default=8192), num_attention_heads=heads,
        num_key_value_heads=_int(cfg, "num_key_value_heads", default=8),
        head_dim=_int(cfg, "head_dim", default=128), vocab_size=_int(cfg, "vocab_size", default=202048),
        tie_word_embeddings=_bool(cfg, "tie_word_embeddings", False),
        attention_bias=_bool(cfg, "attention_bias", False),
        num_experts=_int(cfg, "num_local_experts", default=16), experts_per_token=_int(cfg, "num_experts_per_tok",
                                                                                      default=1),
        max_position_embeddings=_int(cfg, "max_position_embeddings", default=0),
        dense_layers=layers - layers // step if step > 1 else 0,
        dense_intermediate_size=_int(cfg, "intermediate_size_mlp", default=16384) if step > 1 else 0,
        qk_norm=_bool(cfg, "use_qk_norm", True), moe_layer_interval=step if step > 1 else 0,
        nope_layer_interval=nope, attention_chunk_size=_int(cfg, "attention_chunk_size", default=0))


def _siglip(vc: Mapping[str, Any], image_tokens: int, text_hidden: int) -> VisionTower:
    """Gemma 3's SigLIP encoder (transformers' SiglipVisionConfig defaults where a key is absent); its patches per side
    pooled to the image tokens' side (Gemma3MultiModalProjector: AvgPool2d)."""
    if _bool(vc, "vision_use_head", True):
        raise UnsupportedError(_CONFIG, "'vision_config.vision_use_head' true (a pooling head) is not modelled; "
                                        "Gemma 3 ships it false")
    image, patch = _int(vc, "image_size", default=224), _int(vc, "patch_size", default=16)
    side, tokens_side = image // patch, int(image_tokens ** 0.5)
    if tokens_side == 0 or tokens_side ** 2 != image_tokens or side % tokens_side:
        raise InvalidFieldError(_CONFIG, f"'mm_tokens_per_image' {image_tokens} must be a square whose side divides "
                                         f"the {side} patches per side")
    return VisionTower(depth=_int(vc, "num_hidden_layers", default=12),
                       embed_dim=_int(vc, "hidden_size", default=768),
                       num_heads=_int(vc, "num_attention_heads", default=12), mlp_ratio=4, patch_size=patch,
                       temporal_patch_size=1, in_channels=_int(vc, "num_channels", default=3),
                       spatial_merge_size=side // tokens_side, out_hidden_size=text_hidden,
                       intermediate_size=_int(vc, "intermediate_size", default=3072), image_size=image)


def _shared_experts_moe(cfg: Mapping[str, Any], normalises: bool = True) -> dict[str, Any]:
    """The mixture-of-experts keys DeepSeek-V3 and GLM-4.5 share: first_k_dense_replace dense layers of
    intermediate_size, then n_routed_experts of moe_intermediate_size with n_shared_experts always on. Only the
    routing as shipped (top-k weights normalised, where the router reads norm_topk_prob) is modelled; a
    next-token-prediction layer (num_nextn_predict_layers) is not loaded by transformers and so not counted."""
    if normalises and not _bool(cfg, "norm_topk_prob", True):
        raise UnsupportedError(_CONFIG, "norm_topk_prob false is not modelled; DeepSeek-V3, Moonlight, Kimi-K2 and "
                                        "GLM-4.5 ship it true")
    expert_width = _int(cfg, "moe_intermediate_size")
    return dict(num_experts=_int(cfg, "n_routed_experts"), experts_per_token=_int(cfg, "num_experts_per_tok"),
                intermediate_size=expert_width,
                shared_expert_intermediate_size=expert_width * _int(cfg, "n_shared_experts", default=1),
                dense_layers=_int(cfg, "first_k_dense_replace", default=0),
                dense_intermediate_size=_int(cfg, "intermediate_size"))


def _partial_rotary_dims(cfg: Mapping[str, Any], heads: int) -> int:
    """The dimensions of each head RoPE turns where only a part is (Phi, GLM-4.5): partial_rotary_factor of the head,
    at the top level or in rope_parameters, half by default as both transformers configs have it."""
    head_dim = _int(cfg, "head_dim", default=0) or _int(cfg, "hidden_size") // heads
    factor = _fraction(cfg, "partial_rotary_factor", _fraction(_object(cfg, "rope_parameters"), "partial_rotary_factor",
                                                               0.5))
    return int(head_dim * factor)


def _glm4_moe(cfg: Mapping[str, Any]) -> Architecture:
    """GLM-4.5's config (transformers' Glm4MoeConfig): grouped-query attention with q/k/v biased by attention_bias,
    RoPE over partial_rotary_factor of each head (0.5 by default), use_qk_norm; DeepSeek-V3's experts."""
    heads = _int(cfg, "num_attention_heads")
    return Architecture(
        family=Family.GLM4_MOE, num_layers=_int(cfg, "num_hidden_layers"), hidden_size=_int(cfg, "hidden_size"),
        num_attention_heads=heads, num_key_value_heads=_int(cfg, "num_key_value_heads", default=heads) or heads,
        head_dim=_int(cfg, "head_dim", default=0), rotary_dims=_partial_rotary_dims(cfg, heads),
        vocab_size=_int(cfg, "vocab_size"),
        tie_word_embeddings=_bool(cfg, "tie_word_embeddings", False),
        attention_bias=_bool(cfg, "attention_bias", False), qk_norm=_bool(cfg, "use_qk_norm", False),
        max_position_embeddings=_int(cfg, "max_position_embeddings", default=0), **_shared_experts_moe(cfg))


def _deepseek(cfg: Mapping[str, Any], family: Family) -> Architecture:
    """DeepSeek-V2's and V3's configs (transformers' DeepseekV2Config, DeepseekV3Config): latent attention and their
    experts (_shared_experts_moe); V2's router (softmax, top-k weights not normalised) may first keep the best expert
    groups (topk_method group_limited_greedy)."""
    v2 = family is Family.DEEPSEEK_V2
    method = cfg.get("topk_method", "greedy") if v2 else "greedy"
    if method not in ("greedy", "group_limited_greedy"):
        raise UnsupportedError(_CONFIG, f"topk_method {echo(method)} is not modelled; choose greedy or "
                                        "group_limited_greedy")
    heads = _int(cfg, "num_attention_heads")
    latent = LatentAttention(q_lora_rank=_int(cfg, "q_lora_rank", default=0), kv_lora_rank=_int(cfg, "kv_lora_rank"),
                             qk_rope_head_dim=_int(cfg, "qk_rope_head_dim"),
                             qk_nope_head_dim=_int(cfg, "qk_nope_head_dim"), v_head_dim=_int(cfg, "v_head_dim"))
    return Architecture(
        family=family, num_layers=_int(cfg, "num_hidden_layers"), hidden_size=_int(cfg, "hidden_size"),
        num_attention_heads=heads, num_key_value_heads=heads, head_dim=latent.qk_head_dim,
        rotary_dims=latent.qk_rope_head_dim, vocab_size=_int(cfg, "vocab_size"),
        tie_word_embeddings=_bool(cfg, "tie_word_embeddings", False),
        attention_bias=_bool(cfg, "attention_bias", False), latent_attention=latent,
        group_limited_routing=method == "group_limited_greedy",
        max_position_embeddings=_int(cfg, "max_position_embeddings", default=0),
        **_shared_experts_moe(cfg, normalises=not v2))
