# syntax=docker/dockerfile:1.7
# The worker image: CUDA torch, DeepSpeed with its CUDA ops prebuilt, PEFT, bitsandbytes (the train extra), NVML;
# non-root.
# Build from the repository root (versions: constraints.txt, the same the tests install; torch==2.13.0 from
# PyPI is its CUDA 12.8 build here, the CPU build on the test machines):
#   docker build -f deploy/docker/worker.Dockerfile -t tunefleet-worker .
#   docker build -f deploy/docker/worker.Dockerfile --build-arg TORCH_CUDA_ARCH_LIST="9.0" -t ... .   # H100 only
#
# Bases pinned by digest (as pinned in public Dockerfiles, 2026; not re-resolved here: no registry access):
# the CUDA 12.8.1 devel image to compile DeepSpeed's ops with nvcc, the matching runtime image (no compiler)
# to run. Refresh with: docker buildx imagetools inspect nvidia/cuda:12.8.1-runtime-ubuntu22.04
FROM nvidia/cuda:12.8.1-cudnn-devel-ubuntu22.04@sha256:ad6d59a3bbf3e82c1c849c9ac09cfc2a3e0bbb8655042fd899be6681b3fe2a85 AS build
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends python3.11 python3.11-venv python3.11-dev && \
    rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY protos protos
COPY common common
COPY contract contract
COPY planner planner
COPY fleet fleet
COPY executor executor
COPY clients clients
COPY launch launch
# A100 (8.0), A10/L4/RTX 30-40 (8.6, 8.9), H100/H200 (9.0): the GPU classes of planner/data/gpus.py.
ARG TORCH_CUDA_ARCH_LIST="8.0;8.6;8.9;9.0"
ENV TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST}
RUN python3.11 -m venv /opt/tunefleet && \
    /opt/tunefleet/bin/pip install --no-cache-dir -c constraints.txt "$(python3.11 -c 'import tomllib; print(next(d for d in tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["train"] if d.startswith("torch")))')" && \
    DS_BUILD_OPS=0 DS_BUILD_FUSED_ADAM=1 DS_BUILD_CPU_ADAM=1 DS_BUILD_UTILS=1 \
        /opt/tunefleet/bin/pip install --no-cache-dir --no-build-isolation -c constraints.txt ".[train,queue,store]"

FROM nvidia/cuda:12.8.1-runtime-ubuntu22.04@sha256:fcbbd60a5ad3db3a1c7375bf14546b369b54064c513224310b2026df50c7a9bd AS worker
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends python3.11 && rm -rf /var/lib/apt/lists/* && \
    groupadd --system --gid 10001 tunefleet && \
    useradd --system --uid 10001 --gid tunefleet --home-dir /home/tunefleet --create-home --shell /usr/sbin/nologin tunefleet
COPY --from=build /opt/tunefleet /opt/tunefleet
ENV PATH=/opt/tunefleet/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HF_HOME=/home/tunefleet/.cache/huggingface
USER 10001:10001
WORKDIR /home/tunefleet
# The worker has no port: its liveness is its heartbeat in Redis (tunefleet fleet shows the age).
ENTRYPOINT ["tunefleet", "worker"]
CMD ["--work-dir", "/data", "--work-dir-shared"]
