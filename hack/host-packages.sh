#!/usr/bin/env bash
# The container tools the module's image build and its KLM end-to-end test need, from the
# host's package manager: buildah (builds the Dockerfile), podman and runc (run the manager's
# pods in tests/harness/kubelet.py), slirp4netns (their network), mmdebstrap (a stand-in for
# the Dockerfile's base image where no registry serves it; hack/image.sh), uidmap.
#
#   hack/host-packages.sh           install what is missing (apt-get, as root), else say what
#   hack/host-packages.sh --check   only say what is missing; exit 1 if anything is
set -euo pipefail
tools=(buildah podman runc slirp4netns mmdebstrap newuidmap)
packages=(buildah podman runc slirp4netns mmdebstrap uidmap)
missing=()
for i in "${!tools[@]}"; do
  command -v "${tools[$i]}" >/dev/null 2>&1 || missing+=("${packages[$i]}")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  echo "host-packages: missing ${missing[*]} (make setup installs them with apt-get as root)" >&2
  exit 1
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "host-packages: missing ${missing[*]}; install them with your package manager" >&2
  echo "  (Debian/Ubuntu: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "host-packages: installing ${missing[*]} with apt-get ..." >&2
start=$SECONDS
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${missing[@]}" >/dev/null
echo "host-packages: installed in $((SECONDS - start))s" >&2
