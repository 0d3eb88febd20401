#!/usr/bin/env bash
# Apply a kustomize base server-side, in the order the API server needs:
# CRDs and Namespaces first, wait until the CRDs are Established, then
# everything else (Roles and Deployments need their namespaces; Flux objects
# need their CRDs).
#
#   hack/apply.sh [DIR] [-- extra kubectl apply flags]
#
#   DIR   a kustomize directory, default config/install (the kyma-system namespace and the
#         module; no Flux: the manager uses the cluster's, or installs its own at run time);
#         config/default where the namespace exists already.
#
# Uses $KUBECTL (default: tools/bin/kubectl when it was built, else kubectl on PATH) and the
# usual KUBECONFIG.
# Field manager: kyma-gpu-install. Re-running it is safe (server-side apply is
# idempotent).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -z "${KUBECTL:-}" ]]; then
  KUBECTL="${ROOT}/tools/bin/kubectl"
  [[ -x "${KUBECTL}" ]] || KUBECTL="$(command -v kubectl || true)"
  [[ -n "${KUBECTL}" ]] || { echo "hack/apply.sh: no kubectl: build tools/bin/kubectl (make tools), put kubectl on PATH, or set KUBECTL" >&2; exit 2; }
fi
DIR="${1:-config/install}"
shift || true
[[ "${1:-}" == "--" ]] && shift
EXTRA=("$@")

case "${DIR}" in /*) ;; *) DIR="${ROOT}/${DIR}" ;; esac

WORK="$(mktemp -d)"
trap 'rm -rf "${WORK}"' EXIT

"${KUBECTL}" kustomize "${DIR}" > "${WORK}/all.yaml"

# kustomize output: documents separated by `---` lines, top-level keys at
# column 0, so a document's kind is its `^kind: ` line.
awk -v first="${WORK}/first.yaml" -v rest="${WORK}/rest.yaml" '
  function flush() {
    if (doc == "") return
    out = (kind == "CustomResourceDefinition" || kind == "Namespace") ? first : rest
    printf "---\n%s", doc >> out
    doc = ""; kind = ""
  }
  /^---$/ { flush(); next }
  /^kind: / { kind = $2 }
  { doc = doc $0 "\n" }
  END { flush() }
' "${WORK}/all.yaml"

apply() {
  "${KUBECTL}" apply --server-side --field-manager=kyma-gpu-install "${EXTRA[@]}" -f "$1"
}

if [[ -s "${WORK}/first.yaml" ]]; then
  apply "${WORK}/first.yaml"
  crds="$(awk '/^kind: CustomResourceDefinition$/ {c=1} c && /^  name: / {print "crd/" $2; c=0} /^---$/ {c=0}' "${WORK}/first.yaml")"
  if [[ -n "${crds}" ]]; then
    # kubectl wait fails at once ("accessor error: <nil> ... expected []interface{}") on a CRD
    # whose status.conditions the API server has not written yet (a big CRD such as the Gpu's
    # on a loaded machine): let each CRD get its conditions first, 60 s at most.
    for crd in ${crds}; do
      for _ in $(seq 1 120); do
        [[ -n "$("${KUBECTL}" get "${crd}" -o jsonpath='{.status.conditions}')" ]] && break
        sleep 0.5
      done
    done
    # shellcheck disable=SC2086
    "${KUBECTL}" wait --for=condition=Established --timeout=60s ${crds}
  fi
fi
if [[ -s "${WORK}/rest.yaml" ]]; then
  apply "${WORK}/rest.yaml"
fi
echo "apply: $(grep -c '^kind: ' "${WORK}/all.yaml") objects from ${DIR#"${ROOT}"/} applied server-side"
