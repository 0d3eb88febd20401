#!/usr/bin/env bash
# The container tools the module's image build and its real-node tests need, from the host's
# package manager: buildah (builds the Dockerfile), podman (imports the stand-in base image
# and pushes; hack/image.sh), mmdebstrap (a stand-in for the Dockerfile's base image where no
# registry serves it), uidmap; containerd, runc, the CNI plugins (bridge, host-local,
# loopback), iptables and util-linux's unshare/nsenter for the real node the manager's pods
# run on (tests/harness/realnode.py, with the kubelet that `make tools` builds); chromium for the
# Kyma dashboard's end-to-end test (tests/harness/dashboard.py) and npm, which builds the
# dashboard (tools/dashboard.sh; node 24 itself comes from the npm registry).
#
#   hack/host-packages.sh [image]           install what is missing (apt-get, as root), else
#                                           say what; `image`: only what the image build needs
#   hack/host-packages.sh [image] --check   only say what is missing; exit 1 if anything is
set -euo pipefail
tools=(buildah podman runc mmdebstrap newuidmap containerd /usr/lib/cni/bridge iptables nsenter
  /usr/bin/chromium npm)
packages=(buildah podman runc mmdebstrap uidmap containerd containernetworking-plugins iptables util-linux
  chromium npm)
if [[ "${1:-}" == "image" ]]; then
  shift
  tools=("${tools[@]:0:5}") packages=("${packages[@]:0:5}")
fi
missing=()
for i in "${!tools[@]}"; do
  if [[ ${tools[$i]} == /* ]]; then
    [[ -x ${tools[$i]} ]] || missing+=("${packages[$i]}")
  else
    command -v "${tools[$i]}" >/dev/null 2>&1 || missing+=("${packages[$i]}")
  fi
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
