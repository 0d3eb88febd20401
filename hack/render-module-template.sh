#!/usr/bin/env bash
# Render the module manifest and KLM's ModuleTemplate into config/module/.
# See hack/render_module_template.py for options and what is assumed.
#
#   hack/render-module-template.sh                 # write config/module/*
#   hack/render-module-template.sh --check         # fail if they are stale
#   IMAGE=reg/gpu-manager:dev hack/render-module-template.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-${ROOT}/.venv/bin/python}"
[[ -x "${PY}" ]] || PY=python3
args=("$@")
if [[ -n "${IMAGE:-}" ]]; then
  args+=(--image "${IMAGE}")
fi
exec "${PY}" "${ROOT}/hack/render_module_template.py" "${args[@]}"
