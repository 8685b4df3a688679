"""The Plan form asks the planner what the CLI asks for the same flags, and a bad field is named."""

from __future__ import annotations

import pytest

from clients import cli, planning_args
from clients.errors import InvalidArgument
from dashboard import planning

FORM = {"model": "meta-llama/Llama-3.1-8B", "method": "qlora", "gpu": "rtx-4090", "gpus": "2", "micro_batch": "4",
        "seq_len": "1024", "grad_accum": "2", "zero": "2", "offload": "optimizer", "grad_ckpt": "off",
        "tokens": "5M", "budget": "20", "dataset": ""}


def test_the_forms_fit_request_is_the_clis() -> None:
    from_form = planning_args.fit_request(planning.parse("fit", FORM))
    from_cli = planning_args.fit_request(cli.build_parser().parse_args(
        ["fit", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--gpu", "rtx-4090", "--gpus", "2",
         "--micro-batch", "4", "--seq-len", "1024", "--grad-accum", "2", "--zero", "2", "--offload", "optimizer",
         "--no-grad-ckpt"]))
    assert from_form == from_cli


def test_the_forms_recommend_request_is_the_clis_and_leaves_out_the_fit_only_fields() -> None:
    from_form = planning_args.recommend_request(planning.parse("recommend", FORM))
    from_cli = planning_args.recommend_request(cli.build_parser().parse_args(
        ["recommend", "--model", "meta-llama/Llama-3.1-8B", "--method", "qlora", "--micro-batch", "4", "--seq-len",
         "1024", "--grad-accum", "2", "--no-grad-ckpt", "--tokens", "5M", "--budget", "20", "--limit",
         str(planning.RECOMMEND_LIMIT)]))
    assert from_form == from_cli
    assert from_form.constraints.max_cost_usd == 20 and from_form.workload.dataset_tokens == 5_000_000


@pytest.mark.parametrize(("field", "value", "named"), [
    ("micro_batch", "zero", "--micro-batch"), ("method", "lora-9bit", "--method"), ("zero", "7", "--zero"),
    ("tokens", "lots", "--tokens")])
def test_a_bad_field_is_refused_naming_it(field: str, value: str, named: str) -> None:
    command = "recommend" if field == "tokens" else "fit"
    with pytest.raises(InvalidArgument) as refused:
        planning.parse(command, {**FORM, field: value})
    assert named in str(refused.value) and "change that field" in str(refused.value)


def test_the_form_opens_no_file_of_the_dashboards_host(tmp_path) -> None:  # noqa: ANN001 - pytest's tmp_path
    secret = tmp_path / "config.json"
    secret.write_text('{"hidden_size": 4096}')
    for model in (str(secret), str(tmp_path), "/etc/shadow"):
        for command, build in (("fit", planning_args.fit_request), ("recommend", planning_args.recommend_request)):
            request = build(planning.parse(command, {**FORM, "model": model, "dataset": str(secret)}),
                            local_files=False)
            assert request.model.catalog_name == model and not request.model.config_json, "a path is only a name"
    rec = planning_args.recommend_request(planning.parse("recommend", {**FORM, "dataset": "data/t.jsonl"}),
                                          local_files=False)
    assert rec.dataset.local_path == "data/t.jsonl", "a path on the fleet's storage, neither resolved nor checked here"
    none = planning_args.recommend_request(planning.parse("recommend", FORM), local_files=False)
    assert not none.dataset.local_path and not none.dataset.hub_name, "no dataset: none asked for"
    with_files = planning_args.fit_request(planning.parse("fit", {**FORM, "model": str(secret)}))
    assert with_files.model.config_json, "the CLI (local_files) still reads the user's own config.json"


def test_the_forms_margin_is_fits_margin() -> None:
    from_form = planning_args.fit_request(planning.parse("fit", {**FORM, "margin": "10%"}), local_files=False)
    assert from_form.margin_fraction == 0.1, "the Plan page has the --margin its tight note points to"
