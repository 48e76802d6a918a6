#!/usr/bin/env bash
# Makes sure promtool (and a Prometheus server) are installed, from Debian's `prometheus` package, and
# prints promtool's path on stdout. The alert-rule tests (internal/render) run it when promtool is not
# on PATH: they check every rendered rule file with `promtool check rules` and unit-test it with
# `promtool test rules`.
#
#   hack/setup-prometheus.sh
#
# Installing needs root (or sudo) and access to Debian's package mirrors; the script runs
# `apt-get update` once and `apt-get install -y --no-install-recommends prometheus`. When promtool is
# already on PATH (or in /usr/bin), nothing is installed. Progress goes to stderr.
set -euo pipefail

log() { echo "setup-prometheus: $*" >&2; }
die() { echo "setup-prometheus: ERROR: $*" >&2; exit 1; }

case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
  *) die "unknown argument $1 (see --help)" ;;
esac

find_promtool() {
  if command -v promtool >/dev/null 2>&1; then
    command -v promtool
  elif [ -x /usr/bin/promtool ]; then
    echo /usr/bin/promtool
  else
    return 1
  fi
}

if path=$(find_promtool); then
  echo "$path"
  exit 0
fi

command -v apt-get >/dev/null 2>&1 ||
  die "promtool is not installed and apt-get is missing: install Prometheus (promtool) with your package manager, or put promtool on PATH"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 ||
    die "promtool is not installed and installing it needs root: run 'apt-get install prometheus' as root, or put promtool on PATH"
  SUDO=(sudo)
fi

log "promtool not found; installing Debian's prometheus package"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq >&2 || die "apt-get update failed (are Debian's package mirrors reachable?)"
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends prometheus >&2 ||
  die "apt-get install prometheus failed"

path=$(find_promtool) || die "the prometheus package is installed but promtool is not on PATH nor in /usr/bin"
log "installed $("$path" --version 2>&1 | head -n 1)"
echo "$path"
