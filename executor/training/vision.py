"""Vision-language data (Qwen2-VL family): chat records with image parts to token ids, pixel values and image
grids, within the plan's image-token budget.

Images are local files named in the messages ({"type": "image", "path": "cat.png"}, relative to the JSONL file),
read under the host's data roots. The model's own image processor (preprocessor_config.json next to the weights)
turns them into patches; each image placeholder token of the chat template is expanded to one token per merged
patch, as Qwen2VLProcessor does. An image whose tokens exceed its share of training.image_tokens is scaled down
with the processor's smart_resize (dataset.oversize_images resize, the default) or refused (refuse).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from contract.errors import PlanError
from contract.paths import Roots
from contract.run_config import DatasetConfig, OversizeImages
from executor.training import data


@dataclass(frozen=True)
class VisionExample(data.Example):
    """A chat example with its images' patches, in the order its image tokens appear."""

    pixel_values: np.ndarray  # (patches, channels × temporal × patch × patch), float32
    image_grid_thw: np.ndarray  # (images, 3): frames, patch rows, patch columns


@dataclass(frozen=True)
class ImageGeometry:
    """What the model's image processor makes of pixels: patch size, merge size and its pixel bounds."""

    patch_size: int
    merge_size: int
    min_pixels: int
    max_pixels: int

    @classmethod
    def of(cls, processor: Any) -> ImageGeometry:
        size = getattr(processor, "size", None) or {}
        return cls(int(processor.patch_size), int(processor.merge_size),
                   int(size.get("shortest_edge", getattr(processor, "min_pixels", 0))),
                   int(size.get("longest_edge", getattr(processor, "max_pixels", 0))))

    @property
    def factor(self) -> int:
        return self.patch_size * self.merge_size

    def tokens(self, height: int, width: int) -> int:
        return (height // self.patch_size) * (width // self.patch_size) // self.merge_size ** 2

    def resized(self, height: int, width: int, max_tokens: int | None = None) -> tuple[int, int]:
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

        max_pixels = self.max_pixels if max_tokens is None else min(self.max_pixels, max_tokens * self.factor ** 2)
        h, w = smart_resize(height, width, factor=self.factor, min_pixels=self.min_pixels, max_pixels=max_pixels)
        return int(h), int(w)


def _image_parts(record: dict[str, Any], number: int) -> list[tuple[str, str]]:
    """(field, path) of every image part, in the order the template renders them."""
    parts = []
    for i, message in enumerate(record.get("messages") or []):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for j, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "image":
                where = f"record {number} messages[{i}].content[{j}]"
                path = part.get("path", part.get("image"))
                if not isinstance(path, str) or not path:
                    raise PlanError("dataset", f"{where} is an image part without a 'path' to a local file")
                parts.append((where, path))
    return parts


@dataclass(frozen=True)
class Images:
    """How one dataset's images are read: where relative paths start, the roots, the budget and the policy."""

    base_dir: Path
    roots: Roots
    geometry: ImageGeometry
    budget_tokens: int
    oversize: OversizeImages

    def load(self, parts: Sequence[tuple[str, str]]) -> list[Any]:
        from PIL import Image, UnidentifiedImageError

        images = []
        share = self.budget_tokens // max(len(parts), 1)
        for where, name in parts:
            path = Path(name) if Path(name).is_absolute() else self.base_dir / name
            if not path.is_file():
                raise PlanError("dataset", f"{where}: image {path} does not exist; image paths are relative to the "
                                           "dataset file")
            self.roots.readable("dataset", path)
            try:
                with Image.open(path) as opened:
                    image = opened.convert("RGB")
            except (UnidentifiedImageError, OSError) as e:
                raise PlanError("dataset", f"{where}: {path} is not an image Pillow can read: {e}") from e
            images.append(self._fit(image, where, share))
        return images

    def _fit(self, image: Any, where: str, share: int) -> Any:
        g = self.geometry
        natural = g.resized(image.height, image.width)
        tokens = g.tokens(*natural)
        if tokens <= share:
            return image
        if self.oversize is OversizeImages.REFUSE:
            raise PlanError("dataset.oversize_images",
                            f"{where}: the image is {image.width}×{image.height} pixels, {tokens} image tokens, over "
                            f"its budget of {share} (training.image_tokens {self.budget_tokens} shared by the "
                            "record's images); shrink it, raise training.image_tokens, or set "
                            "dataset.oversize_images resize")
        h, w = g.resized(image.height, image.width, max_tokens=share)
        if g.tokens(h, w) > share:
            raise PlanError("training.image_tokens",
                            f"{where}: even at the image processor's smallest size the image is {g.tokens(h, w)} "
                            f"tokens, over its budget of {share}; raise training.image_tokens")
        return image.resize((w, h))


def _expand(ids: Sequence[int], image_token_id: int, counts: Sequence[int]) -> list[int]:
    """Each image placeholder repeated once per image token (Qwen2VLProcessor's expansion, on ids)."""
    out: list[int] = []
    seen = 0
    for token in ids:
        if token == image_token_id:
            if seen >= len(counts):
                raise PlanError("dataset", "the chat template rendered more image placeholders than the record has "
                                           "images")
            out += [image_token_id] * counts[seen]
            seen += 1
        else:
            out.append(token)
    return out


def tokenize(records: Sequence[dict[str, Any]], tokenizer: Any, processor: Any, image_token_id: int,
             d: DatasetConfig, sequence_length: int, image_tokens: int, roots: Roots) -> list[VisionExample]:
    """Chat records (with or without images) to examples; labels on assistant turns only."""
    if d.format is not data.DatasetFormat.CHAT:
        raise PlanError("dataset.format", "vision-language training reads chat records with image parts; set "
                                          "dataset.format chat")
    if d.packing:
        raise PlanError("dataset.packing", "packing would cut images apart; turn it off for vision-language data")
    geometry = ImageGeometry.of(processor)
    images = Images(Path(d.local_path).parent if d.local_path else Path.cwd(), roots, geometry, image_tokens,
                    d.oversize_images)
    merge = geometry.merge_size ** 2
    examples = []
    for number, record in enumerate(records, start=1):
        parts = _image_parts(record, number)
        if parts and not image_tokens:
            raise PlanError("training.image_tokens", f"record {number} has images but the plan's image budget is 0; "
                                                     "plan with --image-tokens")
        loaded = images.load(parts)
        if loaded:
            pixels = processor(images=loaded, return_tensors="np")
            values = np.asarray(pixels["pixel_values"], dtype=np.float32)
            grids = np.asarray(pixels["image_grid_thw"], dtype=np.int64).reshape(-1, 3)
        else:
            values, grids = np.zeros((0, 0), dtype=np.float32), np.zeros((0, 3), dtype=np.int64)
        counts = [int(g.prod()) // merge for g in grids]

        def render(messages: list[dict[str, Any]], generation_prompt: bool, counts: list[int] = counts) -> list[int]:
            return _expand(data.render(tokenizer, messages, generation_prompt), image_token_id, counts)

        example = data.chat(record, number, tokenizer, render)
        ids, labels = example.input_ids, example.labels
        if len(ids) > sequence_length:
            last_image = max((i for i, t in enumerate(ids) if t == image_token_id), default=-1)
            if last_image >= sequence_length:
                raise PlanError("training.sequence_length",
                                f"record {number} is {len(ids)} tokens and its images end at token {last_image + 1}, "
                                f"past sequence_length {sequence_length}; cutting would split an image: raise "
                                "training.sequence_length or lower training.image_tokens")
            ids, labels = ids[:sequence_length], labels[:sequence_length]
        examples.append(VisionExample(ids, labels, values, grids))
    kept = [e for e in examples if e.trained_tokens > 0]
    if not kept:
        raise PlanError("dataset", "no record has an assistant token to train on")
    return kept


def save(path: Path, examples: Sequence[VisionExample]) -> None:
    """Token ids as data.save_examples stores them, plus each example's patches and image grids."""
    pixels = [e.pixel_values for e in examples if e.pixel_values.size] or [np.zeros((0, 0), np.float32)]
    data.save_arrays(path, {
        **data.token_arrays(examples),
        "patches": np.array([e.pixel_values.shape[0] for e in examples], dtype=np.int64),
        "pixel_values": np.concatenate(pixels),
        "images": np.array([e.image_grid_thw.shape[0] for e in examples], dtype=np.int64),
        "image_grid_thw": np.concatenate([e.image_grid_thw for e in examples]),
    })


def load(path: Path) -> list[VisionExample]:
    with np.load(path) as saved:
        ids, labels = data.token_rows(saved)
        values = data.split_rows(saved["pixel_values"], saved["patches"])
        grids = data.split_rows(saved["image_grid_thw"], saved["images"])
    return [VisionExample(*row) for row in zip(ids, labels, values, grids, strict=True)]
