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

find_tool() {
  if command -v promtool >/dev/null 2>&1; then
    command -v promtool
  elif [ -x /usr/bin/promtool ]; then
    echo /usr/bin/promtool
  else
    return 1
  fi
}

# shellcheck source=lib/debian-package.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian-package.sh"
ensure_debian_tool promtool prometheus
