#!/usr/bin/env bash
# `make setup`: the virtualenv with the pinned dependencies (requirements-dev.lock, with hashes)
# and the module in it (editable), saying what it does: a line every few seconds, never a
# minute of silence. pip's own output is kept in <venv>/setup.log and shown on a failure.
#
#   bash hack/setup-venv.sh VENV PYTHON
set -euo pipefail

venv=${1:-.venv}
python=${2:-python3}
lock=requirements-dev.lock
started=$SECONDS
said=$(mktemp)
trap 'rm -f "$said"' EXIT

say() {
  printf 'setup: [%3ds] %s\n' $((SECONDS - started)) "$*"
  date +%s > "$said"
}

# A line when pip said nothing for 4 s (it unpacks 68 packages without a word for ~15 s).
ticker() {
  while sleep 1; do
    if (($(date +%s) - $(cat "$said") >= 4)); then
      say "  ... $1"
    fi
  done
}

# pip's lines, kept in the log; a milestone line at most every 3 s; errors as they come.
follow() {
  local total=$1 log=$2 count=0 last=$SECONDS line name
  while IFS= read -r line; do
    printf '%s\n' "$line" >> "$log"
    case $line in
      Collecting*)
        count=$((count + 1))
        name=${line#Collecting }
        if ((SECONDS - last >= 3 || count == total)); then
          say "  $count of $total packages fetched (${name%% *})"
          last=$SECONDS
        fi
        ;;
      "Installing collected packages"*)
        if ((total > 1)); then
          say "  unpacking them into $venv"
        fi
        ;;
      *ERROR*|*error:*) printf '%s\n' "$line" >&2 ;;
    esac
  done
}

run_pip() {
  local what=$1 total=$2
  shift 2
  local log="$venv/setup.log" status=0
  ticker "$what" &
  local tick=$!
  "$venv/bin/pip" "$@" 2>&1 | follow "$total" "$log" || status=$?
  kill "$tick" 2>/dev/null || true
  wait "$tick" 2>/dev/null || true
  if ((status != 0)); then
    echo "setup: pip failed; its output ($log) ends with:" >&2
    tail -n 20 "$log" >&2
    exit "$status"
  fi
}

"$python" -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ needed, got " + sys.version'
say "creating $venv with $("$python" --version 2>&1)"
"$python" -m venv "$venv"
: > "$venv/setup.log"
packages=$(grep -c '^[A-Za-z0-9]' "$lock")
say "installing $packages pinned packages from $lock (a first run fetches them: about a minute)"
run_pip "installing the pinned packages" "$packages" install --disable-pip-version-check \
  --progress-bar off --require-hashes -r "$lock"
say "installing the module itself (pip install -e .)"
run_pip "installing the module" 1 install --disable-pip-version-check --progress-bar off \
  --no-deps -e .
say "done: $venv/bin/kyma-gpu --help, or make help for what comes next"
