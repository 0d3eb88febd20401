#!/usr/bin/env bash
# Builds the real test binaries (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kubelet, kwok, nfd-master, nfd-worker, source-controller, helm-controller, helm, flux,
# kubeconform, registry) from their
# Go modules into a user-level cache keyed by version and go.sum, and links
# them into tools/bin. Idempotent: a cached binary is reused, not rebuilt.
#
# The NVIDIA GPU Operator controller (one per chart version in
# GPU_OPERATOR_VERSIONS) is built from the source tarballs in
# ../shared/vendor/gpu-operator (the Go proxy does not serve it) with
# -mod=vendor, keyed by the tarball's sha256. Its cache directory also holds
# the tree's assets/ and manifests/, which the controller reads from
# /opt/gpu-operator (the harness bind-mounts them in a private mount namespace).
#
#   tools/build.sh            build whatever is missing
#   tools/build.sh --print    print the cache directory and exit
#   tools/build.sh --list     print the names it would build (with ONLY: of those)
#
# Independent builds run side by side, TOOLS_JOBS at a time (default 3: on two cores one
# build's compile overlaps another's module downloads and links), the longest first; builds
# that share a module or a source tree (the Kubernetes binaries, NFD's two, the NVIDIA
# controllers, Kyma's three tools) run one after another in one job, so the Go build cache
# serves the second. Each job writes its log to <cache>/.logs/<job>.log; the terminal gets a
# line when a job starts, what it built when it ends, and a failed job's log tail. Kyma
# dashboard (tools/dashboard.sh, not a Go binary, not in --list) is one of the jobs; if it
# fails, the script says so with its log but still succeeds: only the dashboard's end-to-end
# test needs it, and that test then fails with the build's log (never a skip).
#
# Environment: TOOLS_JOBS (above); KYMA_GPU_TOOLS_CACHE overrides the cache root
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/kyma-gpu/tools). ONLY="name ..." builds only
# those (the Makefile's tools-demo and tools-klm sets); gpu-operator means every version in
# GPU_OPERATOR_VERSIONS, gpu-operator-vX.Y.Z one of them.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/versions.env
source "$here/versions.env"
cache_root=${KYMA_GPU_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kyma-gpu/tools}
bin_dir="$here/bin"
mkdir -p "$cache_root" "$bin_dir"

if [[ "${1:-}" == "--print" ]]; then echo "$cache_root"; exit 0; fi
# --list: the names of what a build without ONLY makes (one per line), and nothing else.
listing=0
[[ "${1:-}" == "--list" ]] && listing=1
# listed NAME: under --list, print NAME and say "skip the build".
listed() { [[ $listing == 1 ]] && echo "$1"; }

# One build at a time per cache (not for --list, which builds nothing): a second `make tools` (another checkout, a parallel job)
# waits here and then reuses what the first one built instead of building it again.
[[ $listing == 1 ]] || exec 9>"$cache_root/.build.lock"
if [[ $listing == 0 ]] && ! flock -n 9; then
  echo "tools: another build holds $cache_root/.build.lock; waiting for it ..." >&2
  flock 9
fi

# -mod=readonly: a build must never rewrite the committed go.mod/go.sum (the cache key).
export CGO_ENABLED=0 GOFLAGS=-mod=readonly GOTOOLCHAIN=local
k8s_pkg=k8s.io/component-base/version
k8s_ldflags="-s -w \
 -X $k8s_pkg.gitVersion=$KUBERNETES_VERSION \
 -X $k8s_pkg.gitMajor=$(echo "$KUBERNETES_VERSION" | sed -E 's/^v([0-9]+)\..*/\1/') \
 -X $k8s_pkg.gitMinor=$(echo "$KUBERNETES_VERSION" | sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/') \
 -X $k8s_pkg.gitCommit=0000000000000000000000000000000000000000 \
 -X $k8s_pkg.gitTreeState=clean \
 -X $k8s_pkg.buildDate=1970-01-01T00:00:00Z \
 -X k8s.io/client-go/pkg/version.gitVersion=$KUBERNETES_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=$(echo "$KUBERNETES_VERSION" | sed -E 's/^v([0-9]+)\..*/\1/') \
 -X k8s.io/client-go/pkg/version.gitMinor=$(echo "$KUBERNETES_VERSION" | sed -E 's/^v[0-9]+\.([0-9]+)\..*/\1/')"

# need_go: before the first cold build, a Go at least as new as the newest `go` line of the
# tools' go.mod files (GOTOOLCHAIN=local: Go does not fetch a newer one), or a clear message
# instead of a compiler error. Cached binaries need no Go at all.
go_checked=0
need_go() {
  [[ $go_checked == 1 ]] && return 0
  local wanted have
  wanted=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$here"/*/go.mod | sort -V | tail -1)
  if ! command -v go >/dev/null; then
    echo "tools: Go >= $wanted is needed to build the test binaries, and no \`go\` is on PATH" \
      "(https://go.dev/dl/)" >&2
    exit 1
  fi
  have=$(go env GOVERSION | sed 's/^go//')
  if [[ $(printf '%s\n%s\n' "$wanted" "$have" | sort -V | head -1) != "$wanted" ]]; then
    echo "tools: Go >= $wanted is needed to build the test binaries; found go$have" \
      "($(command -v go)). Install a newer Go (https://go.dev/dl/) first on PATH." >&2
    exit 1
  fi
  go_checked=1
}

# What the jobs built and reused, one line each (a job runs in a subshell of its own).
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
tally() { echo x >>"$state/$1"; }
tallied() { [[ -f "$state/$1" ]] && wc -l <"$state/$1" || echo 0; }
# build NAME MODULE_DIR VERSION PACKAGE [LDFLAGS]
build() {
  local name=$1 dir=$2 version=$3 pkg=$4 ldflags=${5:--s -w}
  local key dest
  listed "$name" && return 0
  key=$(cat "$here/$dir/go.mod" "$here/$dir/go.sum" | sha256sum | cut -c1-12)
  dest="$cache_root/$name-$version-$key"
  if [[ -x "$dest/$name" ]]; then
    tally reused
  else
    local start=$SECONDS
    need_go
    echo "tools: building $name $version (cold build, this takes minutes) ..." >&2
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
    if ! (cd "$here/$dir" && go build -trimpath -ldflags "$ldflags" -o "$dest.tmp/$name" "$pkg"); then
      rm -rf "$dest.tmp"
      echo "tools: building $name $version failed (see above)" >&2
      exit 1
    fi
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
    echo "tools: built $name in $((SECONDS - start))s" >&2
    tally built
  fi
  ln -sfn "$dest/$name" "$bin_dir/$name"
}

only=${ONLY:-}
want() { [[ -z "$only" || " $only " == *" $1 "* ]]; }

# The flux CLI does not build from its module as published: cmd/flux embeds
# manifests/*.yaml, which upstream generates at release time and which is not in
# the module. So: copy the wrapper module (tools/flux) into a temporary directory
# in the cache, `go mod vendor -e` there (it reports the missing embed and still
# writes vendor/), add one placeholder YAML, build with -mod=vendor. The
# placeholder means `flux install`/`flux bootstrap` have no embedded manifests;
# `flux get`/`flux check`/`flux reconcile` are what the harness uses. Same cache
# key as build() (go.mod + go.sum, which vendoring must leave unchanged); the
# vendor tree is deleted after the build.
build_flux() {
  local version=$FLUX_CLI_VERSION key dest start pkg=github.com/fluxcd/flux2/v2/cmd/flux
  listed flux && return 0
  key=$(cat "$here/flux/go.mod" "$here/flux/go.sum" | sha256sum | cut -c1-12)
  dest="$cache_root/flux-$version-$key"
  if [[ -x "$dest/flux" ]]; then
    tally reused
  else
    start=$SECONDS
    need_go
    echo "tools: building flux $version (cold build, this takes minutes; go mod vendor's" \
      "'pattern manifests/*.yaml: no matching files found' is expected) ..." >&2
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp/src"
    cp "$here/flux/go.mod" "$here/flux/go.sum" "$here/flux/tools.go" "$dest.tmp/src/"
    if ! (cd "$dest.tmp/src" && GOFLAGS="" go mod vendor -e \
        && cmp -s go.mod "$here/flux/go.mod" && cmp -s go.sum "$here/flux/go.sum" \
        && [[ -d "vendor/$pkg" ]] && mkdir -p "vendor/$pkg/manifests" \
        && echo "# placeholder: flux install/bootstrap manifests are not embedded in this build" \
          >"vendor/$pkg/manifests/placeholder.yaml" \
        && GOFLAGS=-mod=vendor go build -trimpath \
          -ldflags "-s -w -X main.VERSION=${version#v}" -o "$dest.tmp/flux" "$pkg"); then
      rm -rf "$dest.tmp"
      echo "tools: building flux $version failed (see above)" >&2
      exit 1
    fi
    rm -rf "$dest.tmp/src"
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
    echo "tools: built flux in $((SECONDS - start))s" >&2
    tally built
  fi
  ln -sfn "$dest/flux" "$bin_dir/flux"
}

GPU_OPERATOR_SOURCES=${GPU_OPERATOR_SOURCES:-$(cd "$here/../.." && pwd)/shared/vendor/gpu-operator}
# build_gpu_operator VERSION: cmd/gpu-operator from the vendored source tarball.
build_gpu_operator() {
  local version=$1 tarball key dest src start
  listed "gpu-operator-$version" && return 0
  tarball="$GPU_OPERATOR_SOURCES/gpu-operator-$version-src.tar.gz"
  if [[ ! -f "$tarball" ]]; then
    echo "tools: $tarball is missing; the NVIDIA controller cannot be built" >&2
    exit 1
  fi
  key=$(sha256sum "$tarball" | cut -c1-12)
  dest="$cache_root/gpu-operator-$version-$key"
  if [[ -x "$dest/gpu-operator" && -d "$dest/opt/manifests" ]]; then
    tally reused
  else
    start=$SECONDS
    need_go
    echo "tools: building gpu-operator $version from its vendored sources (about 2-3 minutes) ..." >&2
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp/src" "$dest.tmp/opt"
    tar -xzf "$tarball" -C "$dest.tmp/src" --strip-components=1
    if ! (cd "$dest.tmp/src" && GOFLAGS=-mod=vendor go build -trimpath \
        -ldflags "-s -w -X github.com/NVIDIA/gpu-operator/internal/info.version=$version" \
        -o "$dest.tmp/gpu-operator" ./cmd/gpu-operator); then
      rm -rf "$dest.tmp"
      echo "tools: building gpu-operator $version failed (see above)" >&2
      exit 1
    fi
    # The image layout: assets/* at /opt/gpu-operator, manifests/ below it.
    cp -r "$dest.tmp/src/assets/." "$dest.tmp/opt/"
    cp -r "$dest.tmp/src/manifests" "$dest.tmp/opt/manifests"
    cp "$dest.tmp/src/LICENSE" "$dest.tmp/LICENSE"
    rm -rf "$dest.tmp/src"
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
    echo "tools: built gpu-operator $version in $((SECONDS - start))s" >&2
    tally built
  fi
  ln -sfn "$dest" "$bin_dir/gpu-operator-$version"
}
# Kyma's delivery tools, from the source tarballs (with vendor/) in ../shared/vendor/klm
# (the Go proxy serves none of them): Lifecycle Manager, modulectl and the OCM CLI. The
# three unpack side by side because KLM's go.mod replaces ocm.software/ocm with ../ocm;
# KLM's cache key therefore covers the OCM tarball too. KLM's cache directory also holds
# what it needs next to the binary (skr-webhook/ at <bin>/../skr-webhook) and the CRDs the
# harness installs for it (its own, and the Istio and cert-manager CRDs it expects).
KLM_SOURCES=${KLM_SOURCES:-$(cd "$here/../.." && pwd)/shared/vendor/klm}
klm_src=""
# unpack_klm: the three trees, once per job, in a temporary directory of the cache.
unpack_klm() {
  [[ -n "$klm_src" ]] && return
  klm_src=$(mktemp -d "$cache_root/klm-src.XXXXXX")
  local tarball
  for tarball in lifecycle-manager-src-vendor modulectl-src-vendor ocm-src-vendor; do
    if [[ ! -f "$KLM_SOURCES/$tarball.tar.xz" ]]; then
      echo "tools: $KLM_SOURCES/$tarball.tar.xz is missing; the Kyma tools cannot be built" >&2
      exit 1
    fi
    tar -xJf "$KLM_SOURCES/$tarball.tar.xz" -C "$klm_src"
  done
}
# build_vendored NAME VERSION KEY_TARBALLS DIR PACKAGE LDFLAGS: a binary from an unpacked tree.
build_vendored() {
  local name=$1 version=$2 tarballs=$3 dir=$4 pkg=$5 ldflags=$6 key dest start t
  listed "$name" && return 0
  key=$(for t in $tarballs; do sha256sum <"$KLM_SOURCES/$t.tar.xz"; done | sha256sum | cut -c1-12)
  dest="$cache_root/$name-$version-$key"
  if [[ -x "$dest/bin/$name" ]]; then
    tally reused
  else
    start=$SECONDS
    need_go
    echo "tools: building $name $version from its vendored sources (cold build, minutes) ..." >&2
    unpack_klm
    rm -rf "$dest.tmp" && mkdir -p "$dest.tmp/bin"
    if ! (cd "$klm_src/$dir" && GOFLAGS=-mod=vendor GOPROXY=off go build -trimpath \
        -ldflags "-s -w $ldflags" -o "$dest.tmp/bin/$name" "$pkg"); then
      rm -rf "$dest.tmp"
      echo "tools: building $name $version failed (see above)" >&2
      exit 1
    fi
    if [[ $name == lifecycle-manager ]]; then
      cp -r "$klm_src/$dir/skr-webhook" "$dest.tmp/skr-webhook"
      mkdir -p "$dest.tmp/crds/klm" "$dest.tmp/crds/deps"
      cp "$klm_src/$dir"/config/crd/bases/operator.kyma-project.io_*.yaml "$dest.tmp/crds/klm/"
      cp "$klm_src/$dir"/config/samples/tests/crds/{cert-manager,istio}-*.crds.yaml "$dest.tmp/crds/deps/"
    fi
    cp "$klm_src/$dir/LICENSE" "$dest.tmp/LICENSE"
    rm -rf "$dest" && mv "$dest.tmp" "$dest"
    echo "tools: built $name in $((SECONDS - start))s" >&2
    tally built
  fi
  ln -sfn "$dest/bin/$name" "$bin_dir/$name"
  [[ $name == lifecycle-manager ]] && ln -sfn "$dest" "$bin_dir/lifecycle-manager.d"
  return 0
}
# distribution's registry v3, from the Go module proxy (tools/registry): the OCI registry
# the module's image and OCM component are pushed to in tests, and KLM reads from.
# -- the jobs: what builds one after another, and what side by side ---------------------------

job_etcd() { if want etcd; then build etcd etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3; fi; }
job_kwok() {
  if want kwok; then build kwok kwok "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwok; fi
  # kwokctl (same kwok module and version) only on request, ONLY=kwokctl: it was
  # evaluated as a replacement for the harness's cluster (docs/performance.md), not adopted.
  if [[ " $only " == *" kwokctl "* ]]; then
    build kwokctl kwokctl "$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwokctl
  fi
}
# The kubelet runs the harness's real node (tests/harness/realnode.py) on containerd.
job_kubernetes() {
  local b
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet; do
    if want "$b"; then
      build "$b" kubernetes "$KUBERNETES_VERSION" "k8s.io/kubernetes/cmd/$b" "$k8s_ldflags"
    fi
  done
}
job_source_controller() {
  if want source-controller; then
    build source-controller source-controller "$SOURCE_CONTROLLER_VERSION" github.com/fluxcd/source-controller
  fi
}
job_helm_controller() {
  if want helm-controller; then
    build helm-controller helm-controller "$HELM_CONTROLLER_VERSION" github.com/fluxcd/helm-controller
  fi
}
# node-feature-discovery, the version the NVIDIA chart deploys (tools/nfd): nfd-master and
# nfd-worker label the real node as NFD labels a Kyma cluster's nodes.
job_nfd() {
  local b
  for b in nfd-master nfd-worker; do
    if want "$b"; then
      build "$b" nfd "$NFD_VERSION" "sigs.k8s.io/node-feature-discovery/cmd/$b" \
        "-s -w -X sigs.k8s.io/node-feature-discovery/pkg/version.version=$NFD_VERSION"
    fi
  done
}
# The sandbox ("pause") image's process for the real node's containerd (tools/pause, our own
# twenty lines): no image can be pulled here. Its key is PAUSE_VERSION plus go.mod.
job_pause() { if want pause; then build pause pause "$PAUSE_VERSION" . "-s -w"; fi; }
job_helm() { if want helm; then build helm helm "$HELM_VERSION" helm.sh/helm/v4/cmd/helm; fi; }
# kubeconform validates the rendered manifests in make check, against JSON schemas
# that hack/kubeconform-schemas.py generates offline (its default source is GitHub).
job_kubeconform() {
  if want kubeconform; then
    build kubeconform kubeconform "$KUBECONFORM_VERSION" github.com/yannh/kubeconform/cmd/kubeconform \
      "-s -w -X main.version=$KUBECONFORM_VERSION"
  fi
}
job_flux() { if want flux; then build_flux; fi; }
job_gpu_operator() {
  local v
  for v in $GPU_OPERATOR_VERSIONS; do
    if want gpu-operator || want "gpu-operator-$v"; then build_gpu_operator "$v"; fi
  done
}
job_klm() {
  if want modulectl; then
    build_vendored modulectl "$MODULECTL_VERSION" modulectl-src-vendor modulectl ./cmd \
      "-X github.com/kyma-project/modulectl/cmd/modulectl/version.Version=$MODULECTL_VERSION"
  fi
  if want ocm; then
    build_vendored ocm "$OCM_CLI_VERSION" ocm-src-vendor ocm ./cmds/ocm \
      "-X ocm.software/ocm/api/version.gitVersion=$OCM_CLI_VERSION"
  fi
  if want lifecycle-manager; then
    build_vendored lifecycle-manager "$KLM_VERSION" \
      "lifecycle-manager-src-vendor ocm-src-vendor" lifecycle-manager ./cmd ""
  fi
  if [[ -n "$klm_src" ]]; then rm -rf "$klm_src"; fi
}
# distribution's registry v3, from the Go module proxy (tools/registry): the OCI registry
# the module's image and OCM component are pushed to in tests, and KLM reads from.
job_registry() {
  if want registry; then
    build registry registry "$REGISTRY_VERSION" github.com/distribution/distribution/v3/cmd/registry \
      "-s -w -X github.com/distribution/distribution/v3/version.version=$REGISTRY_VERSION"
  fi
}
# Kyma dashboard for its end-to-end test and `make dashboard` (tools/dashboard.sh); this script
# holds the cache's lock for it.
job_dashboard() {
  if [[ $listing == 0 ]] && want dashboard; then
    KYMA_GPU_TOOLS_LOCK_HELD=1 bash "$here/dashboard.sh"
  fi
}

# Longest first (cold, docs/performance.md#set-up-cold-and-warm), so that the short ones fill
# the gaps at the end.
JOBS_IN_ORDER="kubernetes klm dashboard source_controller gpu_operator kwok etcd nfd
  helm_controller registry flux helm kubeconform pause"
jobs_max=${TOOLS_JOBS:-3}
logs="$cache_root/.logs"
[[ $listing == 1 ]] || mkdir -p "$logs"
declare -A running=()
failed=()

# finish PID STATUS: say what a finished job did; on failure, its log's tail.
finish() {
  local job=${running[$1]} status=$2
  unset "running[$1]"
  grep -E '^(tools|dashboard): (built|reused|building)' "$logs/$job.log" | grep -v building >&2 || true
  if [[ $status != 0 ]]; then
    echo "tools: job $job failed ($status); the last lines of $logs/$job.log:" >&2
    tail -n 60 "$logs/$job.log" | sed "s/^/  $job| /" >&2
    if [[ $job == dashboard ]]; then
      # Only the dashboard's e2e test needs it: that test fails with this log, the rest runs.
      echo "tools: Kyma dashboard is not built; tests/e2e/test_dashboard.py will fail with" \
        "its build log" >&2
    else
      failed+=("$job")
    fi
  fi
}

reap_one() {
  local pid status=0
  wait -n -p pid || status=$?
  finish "$pid" "$status"
}

run_job() {
  local job=$1
  if [[ $listing == 1 ]]; then "job_$job"; return; fi
  while (( ${#running[@]} >= jobs_max )); do reap_one; done
  ( "job_$job" ) >"$logs/$job.log" 2>&1 &
  running[$!]=$job
  echo "tools: job $job started (log: $logs/$job.log)" >&2
}

began=$SECONDS
for job in $JOBS_IN_ORDER; do run_job "$job"; done
[[ $listing == 1 ]] && exit 0
while (( ${#running[@]} > 0 )); do reap_one; done
echo "tools: $(tallied built) built, $(tallied reused) reused from $cache_root" \
  "in $((SECONDS - began))s, $jobs_max jobs at a time" >&2
if (( ${#failed[@]} > 0 )); then
  echo "tools: failed: ${failed[*]} (logs in $logs)" >&2
  exit 1
fi
