"""Turn a Plan into the validated, fully resolved configuration one training run uses.

Pure: no file system, no torch. Every check names the plan field to change.
"""

from __future__ import annotations

import enum
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError
from tunefleet.v1 import plan_pb2, training_pb2

from common.bounds import MAX_RECEIVE_MESSAGE_BYTES, echo
from common.errors import FieldError
from common.strict_json import loads_object
from contract import oom
from contract import training as training_spec
from contract.deepspeed_keys import check_deepspeed_config
from contract.errors import InvalidFieldError, PlanError
from contract.limits import DEEPSPEED_JSON_CHARS, NAME_BYTES, PLAN_BOUNDS
from contract.paths import is_uri
from contract.schema import Loss, Method, Objective, Optimizer, Precision, Recipe, Sharding, TrainingSpec

DEFAULT_EPOCHS = 1.0
# Checkpoints kept on disk; older complete ones are deleted once a newer one is complete.
DEFAULT_KEEP_CHECKPOINTS = 2
# A gang is claimed by this many workers at most: beyond that, a gang waits long to form and a lost host is
# likelier than a finished run; such jobs want a dedicated scheduler (Slurm, Kubernetes' JobSet).
MAX_NODES = 64
# A plan file is at most what a Submit can carry.
PLAN_BYTES = MAX_RECEIVE_MESSAGE_BYTES
PLAN_JSON_DEPTH = 32
DEEPSPEED_JSON_DEPTH = 8
# The plan id is the fleet's job id and its rq job id: rq accepts [A-Za-z0-9_-]+ (rq.job.JOB_ID_PATTERN), so no '.'.
MAX_PLAN_ID_CHARS = 128
_PLAN_ID = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_PLAN_ID_CHARS - 1}}}$")
# Methods and objectives this executor trains; the planner can size more than it can run.
_RUNNABLE_METHODS = (Method.FULL, Method.LORA, Method.QLORA, Method.LORA_8BIT, Method.FREEZE)


class DatasetFormat(enum.Enum):
    TEXT = "text"
    INSTRUCTION = "instruction"
    CHAT = "chat"
    PREFERENCE = "preference"


class OversizeImages(enum.Enum):
    RESIZE = "resize"
    REFUSE = "refuse"


_FORMATS = {plan_pb2.DATASET_FORMAT_UNSPECIFIED: DatasetFormat.TEXT, plan_pb2.DATASET_FORMAT_TEXT: DatasetFormat.TEXT,
            plan_pb2.DATASET_FORMAT_INSTRUCTION: DatasetFormat.INSTRUCTION,
            plan_pb2.DATASET_FORMAT_CHAT: DatasetFormat.CHAT,
            plan_pb2.DATASET_FORMAT_PREFERENCE: DatasetFormat.PREFERENCE}
_OVERSIZE = {plan_pb2.OVERSIZE_IMAGES_UNSPECIFIED: OversizeImages.RESIZE,
             plan_pb2.OVERSIZE_IMAGES_RESIZE: OversizeImages.RESIZE,
             plan_pb2.OVERSIZE_IMAGES_REFUSE: OversizeImages.REFUSE}


@dataclass(frozen=True)
class DatasetConfig:
    local_path: str = ""
    hub_name: str = ""
    format: DatasetFormat = DatasetFormat.TEXT
    split: str = "train"
    packing: bool = False
    oversize_images: OversizeImages = OversizeImages.RESIZE


@dataclass(frozen=True)
class Predicted:
    """What the planner predicted, for the run's summary; zero where the plan carries no prediction."""

    peak_gpu_memory_bytes: int = 0
    allocated_gpu_memory_bytes: int = 0  # the peak less the CUDA context and the allocator's slack
    step_time_s: float = 0.0
    tokens_per_s: float = 0.0
    communication_time_per_step_s: float = 0.0
    capacity_bytes: int = 0  # the device memory the plan was sized for (prediction.fit.capacity_bytes)


@dataclass(frozen=True)
class RunConfig:
    plan_id: str
    model_path: str
    dataset: DatasetConfig
    training: TrainingSpec
    world_size: int  # every rank of every node
    max_steps: int
    epochs: float
    seed: int
    checkpoint_every_steps: int
    output_dir: Path
    deepspeed_config_json: str
    predicted: Predicted = field(default_factory=Predicted)
    keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS
    nodes: int = 1  # hosts the run spans (a fleet gang, fleet.gangs); world_size / nodes ranks on each
    on_oom: oom.Policy = field(default_factory=oom.Policy)
    deterministic: bool = False  # hyperparameters.deterministic: reproducible GPU kernels (executor.training)
    # output_uri as an object-store prefix (s3://bucket/prefix): checkpoints and the final export go there
    # (executor.training.remote); output_dir is then the host's local part of the output (default runs/<plan id>).
    output_store: str = ""

    @property
    def ranks_per_node(self) -> int:
        return self.world_size // self.nodes

    @property
    def deepspeed_config(self) -> dict[str, Any]:
        config: dict[str, Any] = json.loads(self.deepspeed_config_json)
        return config

    @property
    def checkpoint_dir(self) -> Path:
        return self.output_dir / "checkpoints"

    @property
    def final_dir(self) -> Path:
        return self.output_dir / "final"

    @property
    def progress_path(self) -> Path:
        return self.output_dir / "progress.jsonl"

    @property
    def tokenized_path(self) -> Path:
        """The dataset as token ids, written once by the launcher so every rank reads the same examples."""
        return self.output_dir / "data" / "tokenized.npz"

    @property
    def reference_path(self) -> Path:
        """DPO with precompute_reference: the reference log-probs of every pair, computed once for the job."""
        return self.output_dir / "data" / "reference_logps.pt"

    @property
    def log_path(self) -> Path:
        return self.node_log_path(0)

    def node_log_path(self, node_rank: int) -> Path:
        return node_log_path(self.output_dir, node_rank)

    @property
    def summary_path(self) -> Path:
        return self.output_dir / "summary.json"

    @property
    def stop_path(self) -> Path:
        return stop_path(self.output_dir)


STOP_FILE = "STOP"


def _per_node(output_dir: Path, name: str, node_rank: int) -> Path:
    return output_dir / "logs" / (f"{name}.log" if node_rank == 0 else f"{name}.node-{node_rank}.log")


def node_log_path(output_dir: Path, node_rank: int) -> Path:
    """Every rank's output of one node (node 0: train.log; node k of a multi-node run: train.node-k.log)."""
    return _per_node(output_dir, "train", node_rank)


def launcher_log_path(output_dir: Path, node_rank: int) -> Path:
    """A fleet worker's launcher output on one node (launcher.log, launcher.node-k.log)."""
    return _per_node(output_dir, "launcher", node_rank)


def stop_path(output_dir: Path) -> Path:
    """A run that finds this file checkpoints at the end of its current step and stops without ending the job
    (a fleet worker draining or preempting it); its text says why."""
    return output_dir / STOP_FILE


def parse_plan(text: str | bytes, source: str = "plan") -> plan_pb2.Plan:
    """A Plan from its JSON form (what `tunefleet recommend --save-plan` writes) or binary protobuf."""
    plan = plan_pb2.Plan()
    if len(text) > PLAN_BYTES:
        raise PlanError(source, f"is {len(text):,} bytes; a plan is at most {PLAN_BYTES:,}")
    if isinstance(text, bytes) and not text.lstrip().startswith(b"{"):
        try:
            plan.ParseFromString(text)
        except DecodeError as e:
            raise PlanError(source, "is neither a JSON plan (it does not start with '{') nor a binary "
                                    f"tunefleet.v1.Plan ({e}); give the file `tunefleet recommend --save-plan` "
                                    "wrote") from e
        return plan
    fields = loads_object(text, source, max_chars=PLAN_BYTES, max_depth=PLAN_JSON_DEPTH, error=PlanError)
    try:
        json_format.ParseDict(fields, plan)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as e:
        raise PlanError(source, f"is not a tunefleet.v1.Plan: {echo(str(e), 300)}") from e
    return plan


def _training(plan: plan_pb2.Plan, world_size: int) -> TrainingSpec:
    p = plan.training
    for name in ("micro_batch_size", "sequence_length", "gradient_accumulation_steps"):
        if getattr(p, name) <= 0:
            raise PlanError(f"training.{name}", f"is {getattr(p, name)}; a plan must set it to a positive number "
                                                "(the planner writes the value it sized memory for)")
    if p.method == training_pb2.METHOD_UNSPECIFIED:
        raise PlanError("training.method", "is not set; choose full, lora, qlora, lora_8bit or freeze")
    if not p.HasField("zero_stage"):
        raise PlanError("training.zero_stage", "is not set; a plan names its DeepSpeed ZeRO stage (0-3)")
    try:
        t = training_spec.training_from_proto(p, world_size)
    except InvalidFieldError as e:
        raise PlanError(e.field, e.description) from e
    if t.method not in _RUNNABLE_METHODS:
        raise PlanError("training.method", f"{t.method.value} is not a method this executor runs")
    if t.objective is Objective.DPO and (t.image_tokens or t.train_vision_tower):
        raise PlanError("training.objective", "DPO of a vision-language model is not run by this executor; train "
                                              "it with sft, or DPO the language model alone")
    if t.loss is Loss.CHUNKED:
        raise PlanError("training.loss", "the executor computes the standard cross-entropy over the full logits, "
                                         "which a chunked-loss plan did not size memory for; plan with --loss "
                                         "standard")
    if t.recipe is not Recipe.TUNEFLEET:
        raise PlanError("training.recipe", f"{t.recipe.value} describes another trainer's step, which this executor "
                                           "does not run; plan with recipe tunefleet to run it on the fleet")
    if t.sharding is not Sharding.DEEPSPEED:
        raise PlanError("training.sharding", f"this executor shards with DeepSpeed's ZeRO, not {t.sharding.value}; "
                                             "plan with sharding deepspeed to run it on the fleet")
    if t.precision is Precision.BF16_PURE:
        raise PlanError("training.precision", "bf16-pure (no fp32 master weights) is not what this executor runs: "
                                              "DeepSpeed's bf16 optimizer keeps fp32 master weights and states, "
                                              "which a bf16-pure plan did not size memory for; plan with bf16")
    if t.optimizer in (Optimizer.ADAMW_8BIT, Optimizer.PAGED_ADAMW_8BIT):
        raise PlanError("training.optimizer", f"{t.optimizer.value} is not a DeepSpeed optimizer; use adamw or sgd")
    return t


def _deepspeed_json(plan: plan_pb2.Plan, t: TrainingSpec, world_size: int) -> str:
    text = plan.deepspeed_config_json
    if not text:
        raise PlanError("deepspeed_config_json", "is empty; plans from the planner carry the DeepSpeed config")
    config = loads_object(text, "deepspeed_config_json", max_chars=DEEPSPEED_JSON_CHARS,
                          max_depth=DEEPSPEED_JSON_DEPTH, error=PlanError)
    check_deepspeed_config(config)
    expected = {"train_micro_batch_size_per_gpu": t.micro_batch_size,
                "gradient_accumulation_steps": t.gradient_accumulation_steps,
                "train_batch_size": t.micro_batch_size * t.gradient_accumulation_steps * world_size}
    for key, value in expected.items():
        if key in config and config[key] != value:
            raise PlanError("deepspeed_config_json", f"{key} is {config[key]} but the plan's training and hardware "
                                                     f"give {value}; regenerate the plan or fix one of them")
    stage = config.get("zero_optimization", {}).get("stage", 0)
    if stage != t.zero_stage:
        raise PlanError("deepspeed_config_json", f"ZeRO stage {stage} differs from training.zero_stage "
                                                 f"{t.zero_stage}")
    return text


def _path_form(field: str, value: str) -> None:
    """A path names a file: no NUL or other control character (the OS refuses them, or they hide in logs)."""
    bad = next((c for c in value if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if bad is not None:
        raise PlanError(field, f"{echo(value)} holds the control character {bad!r} (at {value.index(bad)}); "
                               "a path may not contain one")
    long = next((part for part in value.split("/") if len(part.encode()) > NAME_BYTES), None)
    if long is not None:
        raise PlanError(field, f"names a file or folder of {len(long.encode())} bytes ({echo(long)}); a filesystem "
                               f"takes at most {NAME_BYTES} bytes per name: shorten it")


# Where a plan's output goes when it names none of its own: DEFAULT_OUTPUT_PARENT/<plan id>, relative to a worker's
# --work-dir (the planner writes the same into every plan it makes). The parent itself is no job's to claim.
DEFAULT_OUTPUT_PARENT = "runs"


def default_output(plan_id: str) -> str:
    return f"{DEFAULT_OUTPUT_PARENT}/{plan_id}"


def output_store(plan: plan_pb2.Plan) -> str:
    """The plan's output_uri when it names object storage (s3://bucket/prefix), else ""."""
    return plan.output_uri.rstrip("/") if is_uri(plan.output_uri) else ""


def _output_dir(plan: plan_pb2.Plan, output_dir: str | None) -> Path:
    uri = output_dir or ("" if output_store(plan) else plan.output_uri) or default_output(plan.plan_id)
    _path_form("output_uri", uri)
    if Path(uri.removeprefix("file://")) in (Path("."), Path("/")):
        raise PlanError("output_uri", f"{echo(uri)} is the host's work dir (or root) itself; name a directory of "
                                      f"the job's own, e.g. {default_output('<plan id>')}")
    if Path(uri.removeprefix("file://")) == Path(DEFAULT_OUTPUT_PARENT):
        raise PlanError("output_uri", f"{echo(uri)} is where every plan without an output of its own writes "
                                      f"({default_output('<plan id>')}); no job may claim it: name a directory of "
                                      f"the job's own, e.g. {default_output(plan.plan_id or '<plan id>')}")
    if uri.startswith("file://"):
        uri = uri.removeprefix("file://")
    elif "://" in uri:
        raise PlanError("output_uri", f"{echo(uri)}: --output names a local directory (the output_uri of a plan may "
                                      "be s3://bucket/prefix)")
    if ".." in Path(uri).parts:
        raise PlanError("output_uri", f"{echo(uri)} climbs out with '..'; name the directory itself (under the "
                                      "host's output roots)")
    return Path(uri)


def _dataset(plan: plan_pb2.Plan) -> DatasetConfig:
    d = plan.dataset
    source = d.WhichOneof("source")
    if source is None:
        raise PlanError("dataset", "names no data; set dataset.local_path to a JSONL file or dataset.hub_name")
    if source == "local_path" and not d.local_path:
        raise PlanError("dataset.local_path", "is empty; give the path of a JSONL file")
    if d.format not in _FORMATS:
        raise PlanError("dataset.format", f"unknown format {d.format}")
    if d.oversize_images not in _OVERSIZE:
        raise PlanError("dataset.oversize_images", f"unknown policy {d.oversize_images}; use resize or refuse")
    dpo = plan.training.objective == training_pb2.OBJECTIVE_DPO
    preference = d.format == plan_pb2.DATASET_FORMAT_PREFERENCE
    if dpo and not preference:
        raise PlanError("dataset.format", "DPO trains on preference pairs: set dataset.format preference "
                                          '({"prompt", "chosen", "rejected"} records)')
    if preference and not dpo:
        raise PlanError("dataset.format", "preference pairs train with training.objective dpo; set it, or give "
                                          "text, instruction or chat data for sft")
    if preference and d.packing:
        raise PlanError("dataset.packing", "preference pairs are not packed; turn packing off")
    return DatasetConfig(local_path=d.local_path, hub_name=d.hub_name, format=_FORMATS[d.format],
                         split=d.split or "train", packing=d.packing, oversize_images=_OVERSIZE[d.oversize_images])


def run_config_from_plan(plan: plan_pb2.Plan, output_dir: str | None = None) -> RunConfig:
    """Validate a plan for this executor and resolve every default; raises PlanError naming the field."""
    try:
        PLAN_BOUNDS.check(plan)
    except FieldError as e:
        raise PlanError(e.field, e.description) from e
    if not _PLAN_ID.match(plan.plan_id):
        suggestion = re.sub(r"[^A-Za-z0-9_-]", "-", plan.plan_id).lstrip("_-")[:MAX_PLAN_ID_CHARS] or "my-plan"
        raise PlanError("plan_id", f"{echo(plan.plan_id)} must be 1-{MAX_PLAN_ID_CHARS} letters, digits, '_' or '-', "
                                   f"starting with a letter or digit (it is the fleet's job id); e.g. "
                                   f"{echo(suggestion)}")
    _path_form("model.weights", plan.model.weights)
    _path_form("dataset.local_path", plan.dataset.local_path)
    _path_form("dataset.hub_name", plan.dataset.hub_name)
    model_path = plan.model.weights or plan.model.catalog_name
    if not model_path:
        raise PlanError("model.weights", "is empty; give a Hugging Face model id or a local model folder")
    hw = plan.hardware
    nodes = hw.nodes or 1
    if nodes > MAX_NODES:
        raise PlanError("hardware.nodes", f"is {nodes}; a fleet gang spans at most {MAX_NODES} hosts")
    if output_store(plan) and nodes > 1:
        raise PlanError("output_uri", f"is {output_store(plan)}, and the run spans {nodes} hosts, whose ranks write "
                                      "one checkpoint together: give it a directory on storage every node mounts")
    world_size = (hw.gpus_per_node or 1) * nodes
    t = _training(plan, world_size)
    w = plan.workload
    h = plan.hyperparameters
    fit, est = plan.prediction.fit, plan.prediction.estimate
    return RunConfig(
        plan_id=plan.plan_id, model_path=model_path, dataset=_dataset(plan), training=t, world_size=world_size,
        max_steps=w.max_steps, epochs=w.epochs or DEFAULT_EPOCHS, seed=h.seed,
        checkpoint_every_steps=h.checkpoint_every_steps, output_dir=_output_dir(plan, output_dir),
        output_store=output_store(plan),
        deepspeed_config_json=_deepspeed_json(plan, t, world_size),
        predicted=Predicted(peak_gpu_memory_bytes=fit.per_gpu.total_bytes,
                            allocated_gpu_memory_bytes=max(0, fit.per_gpu.total_bytes - fit.per_gpu.cuda_context_bytes
                                                           - fit.per_gpu.allocator_bytes),
                            step_time_s=est.step_time_s,
                            tokens_per_s=est.tokens_per_s,
                            communication_time_per_step_s=est.communication_time_per_step_s,
                            capacity_bytes=fit.capacity_bytes),
        nodes=nodes, on_oom=oom.policy_from_proto(plan.on_oom), deterministic=h.deterministic)
