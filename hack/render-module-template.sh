#!/usr/bin/env bash
# Render the module manifest and KLM's ModuleTemplate into config/module/.
# See hack/render_module_template.py for options and what is assumed.
#
#   hack/render-module-template.sh                 # write config/module/*
#   hack/render-module-template.sh --check         # fail if they are stale
#   IMAGE=reg/gpu-manager:dev hack/render-module-template.sh
#   # the release pipeline, after pushing the image (pinned by its real digest):
#   IMAGE=europe-docker.pkg.dev/kyma-project/prod/gpu-manager:0.1.0@sha256:<digest> \
#     hack/render-module-template.sh --release
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-${ROOT}/.venv/bin/python}"
[[ -x "${PY}" ]] || PY=python3
args=("$@")
if [[ -n "${IMAGE:-}" ]]; then
  args+=(--image "${IMAGE}")
fi
exec "${PY}" "${ROOT}/hack/render_module_template.py" "${args[@]}"
