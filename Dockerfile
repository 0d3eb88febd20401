# The GPU manager image: the kyma_gpu kopf operator on a slim Python base.
#
#   builder  creates a virtualenv in /opt/venv, installs the exact runtime pins
#            from requirements.lock (no dependency resolution: --no-deps; pip
#            verifies every download against the lock's sha256 hashes), then
#            the project itself, and proves the set complete with `pip check`.
#            The build context holds the runtime package operator/kyma_gpu
#            alone (.dockerignore): the release tooling (operator/kyma_gpu_tools,
#            the `kyma-gpu` CLI) is not in the context, so the wheel built here
#            has kyma_gpu and its one console script, kyma-gpu-manager
#            (hatch_build.py).
#   final    the same base image, the virtualenv and the values rules, nothing
#            else: no compilers, no package manager runs, no pip in the venv,
#            a numeric non-root user.
#
# hack/image.sh builds it with buildah (`make image`; no Docker engine needed) and
# the module's cluster test runs it with podman. hack/check-dockerfile.sh lints this
# file (hadolint) and replays the builder's pip steps in a clean virtualenv, a quick
# check without a container engine. Keep the commands there and here in step.
#
# The base is pinned to an exact Python patch release and Debian release.
# Pin the digest as well where the build system can resolve it:
#   FROM python:3.11.14-slim-bookworm@sha256:<digest>

FROM python:3.11.14-slim-bookworm AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_INPUT=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src

# The virtualenv gets no pip and no setuptools of its own: the base image's
# pip installs into it (`--python`), so the final image's venv holds exactly
# the locked packages and the project.
RUN python -m venv --without-pip /opt/venv

# Runtime dependencies first: this layer is reused until the lock changes.
COPY requirements.lock ./
RUN pip --python /opt/venv/bin/python install --no-cache-dir --no-deps --require-hashes -r requirements.lock

# The project. The isolated build environment gets hatchling and its
# dependencies at the versions in hack/build-constraints.txt. `pip check`
# fails the build if the lock misses a dependency (--no-deps hides that).
COPY hack/build-constraints.txt hack/build-constraints.txt
COPY pyproject.toml README.md hatch_build.py ./
COPY operator/kyma_gpu/ operator/kyma_gpu/
COPY values-rules/ values-rules/
RUN PIP_CONSTRAINT=/src/hack/build-constraints.txt \
        pip --python /opt/venv/bin/python install --no-cache-dir --no-deps . \
    && pip --python /opt/venv/bin/python check

FROM python:3.11.14-slim-bookworm

# The module version the image is released as (hack/image.sh passes it).
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="gpu-manager" \
      org.opencontainers.image.description="Kyma GPU module: hands the NVIDIA GPU Operator to Flux with values that fit the cluster" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="kyma-project.io"

# HOME points into /tmp, the only writable path at run time (the Deployment
# mounts an emptyDir there and keeps the root filesystem read-only).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    KYMA_GPU_RULES_DIR=/app/values-rules

# Owned by root and not writable for the runtime user: code and rules are
# immutable at run time.
COPY --from=builder /opt/venv /opt/venv
COPY values-rules/ /app/values-rules/

WORKDIR /app

# Numeric, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532

ENTRYPOINT ["kyma-gpu-manager"]
