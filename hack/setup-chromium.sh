#!/usr/bin/env bash
# Makes sure a headless-capable Chromium is installed, from Debian's `chromium` package, and prints
# the browser's path on stdout. The console's browser test (internal/dlqui) drives it with chromedp;
# `make test` and `make console-screenshots` call this script first.
#
#   hack/setup-chromium.sh
#
# Installing needs root (or sudo) and access to Debian's package mirrors; the script runs
# `apt-get update` once and `apt-get install -y --no-install-recommends chromium` (whatever version
# apt offers: the test needs only the DevTools protocol). When chromium is already on PATH (or in
# /usr/bin), nothing is installed. Progress goes to stderr; the path alone to stdout.
set -euo pipefail

log() { echo "setup-chromium: $*" >&2; }
die() { echo "setup-chromium: ERROR: $*" >&2; exit 1; }

case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
  *) die "unknown argument $1 (see --help)" ;;
esac

find_tool() {
  local c
  for c in chromium chromium-browser; do
    if command -v "$c" >/dev/null 2>&1; then
      command -v "$c"
      return 0
    fi
  done
  for c in /usr/bin/chromium /usr/lib/chromium/chromium; do
    if [ -x "$c" ]; then
      echo "$c"
      return 0
    fi
  done
  return 1
}

# shellcheck source=lib/debian-package.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/debian-package.sh"
ensure_debian_tool chromium chromium
