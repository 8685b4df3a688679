"""Edits of a plan for tests that check how each bad value is refused."""

from __future__ import annotations

import json
from collections.abc import Callable

from tunefleet.v1 import plan_pb2


def set_field(path: str, value: object) -> Callable[[plan_pb2.Plan], None]:
    def apply(plan: plan_pb2.Plan) -> None:
        *parents, leaf = path.split(".")
        message = plan
        for name in parents:
            message = getattr(message, name)
        setattr(message, leaf, value)
    return apply


def clear_field(path: str) -> Callable[[plan_pb2.Plan], None]:
    def apply(plan: plan_pb2.Plan) -> None:
        parent, leaf = path.rsplit(".", 1)
        getattr(plan, parent).ClearField(leaf)
    return apply


def edit_deepspeed(**changes: object) -> Callable[[plan_pb2.Plan], None]:
    def apply(plan: plan_pb2.Plan) -> None:
        config = json.loads(plan.deepspeed_config_json)
        config.update(changes)
        plan.deepspeed_config_json = json.dumps(config)
    return apply
