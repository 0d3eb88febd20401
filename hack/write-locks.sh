#!/usr/bin/env bash
# requirements.lock (runtime: pyproject's [project] dependencies) and requirements-dev.lock
# (plus the dev extra, constrained to the runtime lock) with uv pip compile: exact pins and
# the sha256 of every file PyPI serves for each pin, so that pip installs them with
# --require-hashes (make setup, the Dockerfile). uv keeps the versions already in a lock
# (no upgrades unless asked for); resolved for CPython 3.11 on Linux, the image's platform.
#
#   hack/write-locks.sh                 rewrite both locks (make lock; needs PyPI or uv's cache)
#   hack/write-locks.sh --check         fail if a lock is stale against pyproject.toml (make check)
#   hack/write-locks.sh --upgrade-package NAME ...   pass-through options for uv pip compile
#
# UV defaults to the uv of the project's venv (the dev extra pins it).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
uv=${UV:-$root/.venv/bin/uv}
check=0
if [[ "${1:-}" == "--check" ]]; then check=1; shift; fi

out=$root
if [[ $check == 1 ]]; then
  out=$(mktemp -d)
  trap 'rm -rf "$out"' EXIT
  # uv keeps the pins it finds in the output files; relative paths keep the annotations stable
  cp pyproject.toml requirements.lock requirements-dev.lock "$out/"
fi
compile() {
  "$uv" pip compile --quiet --generate-hashes --python-version 3.11 --python-platform linux \
    --custom-compile-command "make lock" "$@"
}
(
  cd "$out"
  compile pyproject.toml -o requirements.lock "$@"
  compile pyproject.toml --extra dev -c requirements.lock -o requirements-dev.lock "$@"
)
if [[ $check == 1 ]]; then
  for lock in requirements.lock requirements-dev.lock; do
    if ! diff -u "$lock" "$out/$lock" >&2; then
      echo "write-locks: $lock is stale against pyproject.toml; run make lock" >&2
      exit 1
    fi
  done
  echo "write-locks: requirements.lock and requirements-dev.lock match pyproject.toml"
fi
