# tunefleet — `make` lists the targets.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
BUF := node_modules/.bin/buf
STAMP := $(VENV)/.installed
# The offline checks of deploy/: checkov in a virtualenv of its own (its pins would fight the project's), and
# the compose specification's JSON schema as docker-compose 1.29.2 ships it (no Docker engine is needed).
# torchtune's recipes in a virtualenv layered over .venv (its site-packages first, then .venv's through a .pth):
# requirements-torchtune.txt says why they cannot share .venv.
TORCHTUNE_VENV := .venv-torchtune
TORCHTUNE_STAMP := $(TORCHTUNE_VENV)/.installed
# transformers 4.45.2's Trainer stack layered over .venv the same way, for plans on an older transformers
# (requirements-legacy.txt says why it cannot share .venv).
LEGACY_VENV := .venv-legacy
LEGACY_STAMP := $(LEGACY_VENV)/.installed
DEPLOY_VENV := .venv-deploy
DEPLOY_STAMP := $(DEPLOY_VENV)/.installed
CHECKOV_VERSION := 3.3.30

.DEFAULT_GOAL := help
.PHONY: help install lock torchtune-env legacy-env redis chromium dashboard-assets deploy-tools run plan test test-fast lint protos protos-check buf-lint bench bench-scheduler bench-storage bench-failover bench-cpu bench-multinode bench-accuracy bench-simulate serve clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

$(PY):
	python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel

$(STAMP): pyproject.toml constraints.txt | $(PY)
	# torch first (the local CPU build), then DeepSpeed without build isolation so it builds
	# against that torch instead of downloading a CUDA one. Every version is the one constraints.txt records:
	# the memory model is byte-exact against particular transformers / DeepSpeed / PEFT / TRL versions.
	@echo "==> installing torch (the CPU build), once per .venv: about a minute"
	$(PIP) install -q -c constraints.txt torch==2.13.0
	@echo "==> installing DeepSpeed, built against that torch: about a minute"
	$(PIP) install -q -c constraints.txt --no-build-isolation "deepspeed>=0.18,<1"
	@echo "==> installing tunefleet and its extras (transformers, PEFT, TRL, rq, the dashboard, test tools)"
	$(PIP) install -q -c constraints.txt -e '.[train,queue,store,dashboard,dev,liger]'
	# DeepSpeed compiles its CPU ops (shared-memory allreduce, Adam) on first use; do it once here, not in a test.
	# executor.training.process points TORCH_EXTENSIONS_DIR at .venv/torch_extensions, so ops build once per venv.
	@echo "==> compiling DeepSpeed's CPU ops (shared-memory allreduce, Adam) with the C++ compiler, once per .venv:" \
		"about two minutes with nothing printed"
	DS_ACCELERATOR=cpu $(PY) -c "from executor.training.process import prepare; prepare(); \
		from deepspeed.accelerator import get_accelerator as a; \
		[a().create_op_builder(n).load(verbose=False) for n in ('ShareMemCommBuilder', 'FusedAdamBuilder')]"
	touch $(STAMP)

install: $(STAMP) ## create .venv and install tunefleet with every extra, at the versions in constraints.txt

lock: $(STAMP) ## record the versions .venv runs in constraints.txt (after a deliberate upgrade; then make bench-simulate)
	{ sed -n '/^#/p' constraints.txt; $(PIP) freeze --exclude-editable | sed 's/+cpu$$//'; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

redis: ## install redis-server and redis-sentinel from Debian's packages if missing (tests start their own on free ports)
	@command -v redis-server >/dev/null && command -v redis-sentinel >/dev/null || \
		{ apt-get update -qq && apt-get install -y -qq redis-server redis-sentinel >/dev/null; }

run: $(STAMP) redis ## the main job: Redis, planner, executor, a worker and the dashboard; plan, submit and watch a tiny job to DONE (RUN_ARGS=--keep-serving keeps them up)
	$(PY) -m devtools.demo $(RUN_ARGS)

plan: $(STAMP) ## planner answers: will Llama-3.1-8B QLoRA fit a 4090, cost, cheapest hardware
	$(VENV)/bin/tunefleet fit --model meta-llama/Llama-3.1-8B --method qlora --gpu rtx-4090 --micro-batch 1 --seq-len 2048
	$(VENV)/bin/tunefleet estimate --model meta-llama/Llama-3.1-8B --method qlora --gpu rtx-4090 --tokens 10M
	$(VENV)/bin/tunefleet recommend --model meta-llama/Llama-3.1-8B --method qlora --tokens 10M --limit 5

chromium: ## install Debian's Chromium if it is missing (the dashboard's browser tests drive it; no browser download)
	@command -v chromium >/dev/null || { apt-get update -qq && apt-get install -y -qq chromium >/dev/null; }

dashboard-assets: ## install the dashboard's chart library from the npm registry into dashboard/static/vendor (committed)
	cd dashboard/assets && npm ci --silent
	cp dashboard/assets/node_modules/uplot/dist/uPlot.iife.min.js dashboard/assets/node_modules/uplot/dist/uPlot.min.css \
		dashboard/static/vendor/
	cp dashboard/assets/node_modules/uplot/LICENSE dashboard/static/vendor/uPlot.LICENSE
	rm -rf dashboard/assets/node_modules

# A virtualenv layered over .venv from requirements-NAME.txt (.venv-torchtune, .venv-legacy), checked by importing
# what it is for
LAYERED_IMPORTS_torchtune := torchtune, omegaconf, executor.training.live_bytes
LAYERED_IMPORTS_legacy := transformers, accelerate, peft, executor.training.live_bytes
.venv-%/.installed: requirements-%.txt | $(STAMP)
	rm -rf .venv-$* && python3 -m venv .venv-$*
	echo "import site; site.addsitedir('$(abspath $(shell $(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])'))')" \
		> $$(.venv-$*/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/tunefleet_venv.pth
	.venv-$*/bin/pip install -q --no-deps -r $<
	.venv-$*/bin/python -c "import $(LAYERED_IMPORTS_$*)"
	touch $@

torchtune-env: $(TORCHTUNE_STAMP) ## .venv-torchtune: torchtune 0.6.1 over .venv, for torchtune plans' simulation

legacy-env: $(LEGACY_STAMP) ## .venv-legacy: transformers 4.45.2's Trainer stack over .venv, for older-transformers plans' simulation

$(DEPLOY_STAMP):
	python3 -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/pip install -q checkov==$(CHECKOV_VERSION)
	$(DEPLOY_VENV)/bin/pip download -q --no-deps -d $(DEPLOY_VENV)/wheels docker-compose==1.29.2
	$(DEPLOY_VENV)/bin/python -c "import zipfile, glob; \
		open('$(DEPLOY_VENV)/compose_spec.json', 'wb').write(zipfile.ZipFile(glob.glob('$(DEPLOY_VENV)/wheels/*.whl')[0]).read('compose/config/compose_spec.json'))"
	@command -v kubectl >/dev/null || { apt-get update -qq && apt-get install -y -qq kubernetes-client >/dev/null; }
	touch $(DEPLOY_STAMP)

deploy-tools: $(DEPLOY_STAMP) ## checkov, the compose schema and kubectl (kustomize) for the offline deploy/ checks

# The suite runs on two pytest-xdist workers, a test file each at a time (--dist loadfile: a file's fixtures stay
# in one process), one OpenMP thread a process (tests/conftest.py). It is CPU-bound on a 2-core machine: three
# workers were hardly faster (1288 s against 1328 s on 2026-11-27, every test slower by the same share; 1314 s against
# 1370 s on 2026-11-29, with 2,324 s of CPU in the 1,316 s: 88 % of both cores). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2

test: $(STAMP) $(TORCHTUNE_STAMP) $(LEGACY_STAMP) $(DEPLOY_STAMP) redis chromium protos-check ## install, check generated code is current, run the whole test suite
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

test-fast: $(STAMP) redis ## the inner loop: every test that starts no training process, installs nothing, needs no layered virtualenv and no browser, and drills no failover
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not training and not install and not layered and not browser and not drill"

lint: $(STAMP) ## ruff and mypy
	$(VENV)/bin/ruff check launch common contract planner fleet clients executor dashboard devtools tests benchmarks
	$(VENV)/bin/mypy launch common contract planner fleet clients executor dashboard devtools

protos: $(STAMP) ## regenerate Python code from protos/
	cd protos && ../$(PY) -m grpc_tools.protoc -I. --python_out=. --pyi_out=. --grpc_python_out=. tunefleet/v1/*.proto

protos-check: $(STAMP) ## fail if the committed generated code is not what protos/ generates
	rm -rf /tmp/tunefleet-protos && mkdir -p /tmp/tunefleet-protos
	cd protos && ../$(PY) -m grpc_tools.protoc -I. --python_out=/tmp/tunefleet-protos --pyi_out=/tmp/tunefleet-protos \
		--grpc_python_out=/tmp/tunefleet-protos tunefleet/v1/*.proto
	for f in /tmp/tunefleet-protos/tunefleet/v1/*; do cmp -s $$f protos/tunefleet/v1/$$(basename $$f) \
		|| { echo "stale generated file: protos/tunefleet/v1/$$(basename $$f); run make protos"; exit 1; }; done
	@echo "generated code is current"

$(BUF):
	npm install --no-save --silent @bufbuild/buf@1

buf-lint: $(BUF) ## buf lint (STANDARD rules) over protos/
	$(BUF) lint

bench: $(STAMP) redis ## latency, load, estimators, training-loop overhead, fleet, recovery, reads at 10k jobs; tables to stdout, CSV to benchmarks/results/
	$(PY) -m benchmarks.latency
	$(PY) -m benchmarks.load
	$(PY) -m benchmarks.estimators
	DS_ACCELERATOR=cpu $(PY) -m benchmarks.training_overhead
	$(PY) -m benchmarks.fleet
	$(PY) -m benchmarks.fleet_recovery
	$(PY) -m benchmarks.fleet_reads

bench-scheduler: $(STAMP) redis ## fair share, quotas, preemption on 64 simulated hosts (real workers, simulated runs): utilisation, shares, waits, ETA error
	$(PY) -m benchmarks.scheduler

bench-multinode: $(STAMP) redis ## multi-node gangs on this machine: gang start latency, step time 1 vs 2 nodes
	DS_ACCELERATOR=cpu $(PY) -m benchmarks.multinode

bench-storage: $(STAMP) ## checkpoints on object storage: upload and download MB/s of a ~1 GiB checkpoint, the training stall with background uploads against a local save
	DS_ACCELERATOR=cpu $(PY) -m benchmarks.storage

bench-failover: $(STAMP) redis ## the fleet through a Redis failover (Sentinel, down-after 5 s): time to the first Submit and training step, jobs lost or run twice; durable acks' cost
	$(PY) -m benchmarks.failover

bench-cpu: $(STAMP) ## the planner's CPU host class measured here: matmul peaks, the executor's steps against the planner's
	DS_ACCELERATOR=cpu $(PY) -m benchmarks.cpu_class

bench-accuracy: $(STAMP) ## planner memory and throughput vs measured rows (third-party, and ours when measured)
	$(PY) -m benchmarks.accuracy

bench-simulate: $(STAMP) $(TORCHTUNE_STAMP) $(LEGACY_STAMP) ## planner memory vs the executor's own step at full size under fake tensors (~25 s a row)
	DS_ACCELERATOR=cpu $(PY) -m benchmarks.simulate

serve: $(STAMP) ## serve the planner on 127.0.0.1:50051
	$(VENV)/bin/tunefleet serve planner

clean: ## remove the virtualenv and caches
	rm -rf $(VENV) $(TORCHTUNE_VENV) $(LEGACY_VENV) .pytest_cache .mypy_cache .ruff_cache node_modules .tunefleet
