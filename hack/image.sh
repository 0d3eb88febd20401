#!/usr/bin/env bash
# Build the manager image from the Dockerfile with buildah (no Docker engine needed), and
# push it to a registry with podman.
#
#   hack/image.sh build [VERSION]            -> localhost/gpu-manager:VERSION
#     IMAGE_DIGESTS=FILE: a release's operand digests (hack/module.py release) become the
#     image's values-rules/image-digests.yaml (the build context is then a copy of what
#     .dockerignore lets in, with that file; the repository is not touched)
#   hack/image.sh push VERSION REPOSITORY    -> REPOSITORY/gpu-manager:VERSION; prints its digest
#
# The Dockerfile's base image (FROM) is pulled when a registry serves it. Where none does
# (this repository's development and CI machines have no route to Docker Hub), a stand-in
# is made from Debian's own packages with mmdebstrap (bookworm, python3.11) and imported
# under the base's name, so the Dockerfile builds unchanged; it is cached in
# ~/.cache/kyma-gpu/images keyed by its recipe. It differs from the real base: Python
# 3.11.2 from Debian instead of the python image's 3.11.x, the interpreter in /usr/bin, a
# bigger image. A release built where the real base can be pulled uses the real one.
#
# Environment: STORAGE_DRIVER (default vfs: overlay needs kernel or FUSE support that
# sandboxes often lack), KYMA_GPU_IMAGE_CACHE (the stand-in's cache), BUILD_CA (a CA bundle
# mounted at build time only, for a TLS-intercepting proxy to PyPI; default: the host's
# bundle when present), PULL_TIMEOUT (seconds to try pulling the real base, default 20).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
NAME=localhost/gpu-manager
CACHE=${KYMA_GPU_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kyma-gpu/images}
BASE=$(awk '/^FROM /{print $2; exit}' "$ROOT/Dockerfile")
DEFAULT_VERSION=$(awk -F'"' '/^version = /{print $2; exit}' "$ROOT/pyproject.toml")
PACKAGES=ca-certificates,netbase,tzdata,python3.11,python3.11-venv,python3-pip,python-is-python3

say() { echo "image: $*" >&2; }
need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { say "$tool is missing; run 'make setup' (it installs buildah, podman, runc, mmdebstrap)"; exit 1; }
  done
}

# The stand-in base: Debian bookworm's minbase with Python 3.11, without docs and locales.
standin_base() {
  local key tar
  key=$(printf '%s\n' "bookworm" "$PACKAGES" "v1" | sha256sum | cut -c1-12)
  tar="$CACHE/debian-bookworm-python3.11-$key.tar"
  if [[ ! -s $tar ]]; then
    need mmdebstrap
    mkdir -p "$CACHE"
    say "building a stand-in for $BASE from Debian packages (mmdebstrap, about 2-5 minutes) ..."
    mmdebstrap --quiet --variant=minbase --format=tar --include="$PACKAGES" \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/locale/*' bookworm "$tar.tmp"
    mv "$tar.tmp" "$tar"
  fi
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' \
    --message "stand-in for $BASE made from Debian bookworm packages (hack/image.sh)" \
    "$tar" "$BASE" >/dev/null
  say "imported the stand-in base as $BASE"
}

ensure_base() {
  podman image exists "$BASE" && return
  if timeout "${PULL_TIMEOUT:-20}" podman pull --quiet "$BASE" >/dev/null 2>&1; then
    say "pulled $BASE"
  else
    say "cannot pull $BASE here: using a stand-in made from Debian packages"
    standin_base
  fi
}

# The repository, or with IMAGE_DIGESTS a copy of what .dockerignore lets in plus the digests.
build_context() {
  if [[ -z ${IMAGE_DIGESTS:-} ]]; then
    echo "$ROOT"
    return
  fi
  [[ -f $IMAGE_DIGESTS ]] || { say "IMAGE_DIGESTS=$IMAGE_DIGESTS is no file"; exit 1; }
  local copy path
  copy=$(mktemp -d)
  cp "$ROOT/.dockerignore" "$copy/"
  while read -r path; do
    (cd "$ROOT" && cp -a --parents "${path%/}" "$copy/")
  done < <(sed -n 's/^!//p' "$ROOT/.dockerignore")
  cp "$IMAGE_DIGESTS" "$copy/values-rules/image-digests.yaml"
  say "the image carries the operand digests of $IMAGE_DIGESTS"
  echo "$copy"
}

build() {
  local version=${1:-$DEFAULT_VERSION} start=$SECONDS ca=${BUILD_CA:-/etc/ssl/certs/ca-certificates.crt}
  need buildah podman
  # One build at a time on this host (parallel test workers build the same image): the second
  # waits, then reuses the first one's stand-in base and layers.
  mkdir -p "$CACHE"
  exec 8>"$CACHE/.build.lock"
  flock 8
  ensure_base
  local mounts=()
  [[ -f $ca ]] && mounts=(-v "$ca:/etc/ssl/certs/ca-certificates.crt:ro")
  local context
  context=$(build_context)
  say "building $NAME:$version from the Dockerfile (buildah) ..."
  # The context is the repository (or its copy with the release's digests); .dockerignore
  # lets only what the Dockerfile copies in.
  buildah bud --quiet --isolation chroot --pull=never --layers "${mounts[@]}" \
    --build-arg "VERSION=$version" -t "$NAME:$version" -f "$ROOT/Dockerfile" "$context" >/dev/null
  [[ $context == "$ROOT" ]] || rm -rf "$context"
  say "built $NAME:$version in $((SECONDS - start))s ($(podman image inspect "$NAME:$version" --format '{{.Size}}') bytes)"
}

push() {
  local version=$1 repository=$2 digest_file tls=()
  need podman
  digest_file=$(mktemp)
  # A plain-http registry on this host (the tests' registry) needs --tls-verify=false.
  [[ $repository == 127.0.0.1:* || $repository == localhost:* ]] && tls=(--tls-verify=false)
  podman push --quiet "${tls[@]}" --digestfile "$digest_file" \
    "$NAME:$version" "docker://$repository/gpu-manager:$version"
  cat "$digest_file"
  echo
  rm -f "$digest_file"
}

case "${1:-}" in
  build) shift; build "$@" ;;
  push) shift; [[ $# -eq 2 ]] || { echo "usage: $0 push VERSION REPOSITORY" >&2; exit 2; }; push "$@" ;;
  *) echo "usage: $0 build [VERSION] | push VERSION REPOSITORY" >&2; exit 2 ;;
esac
