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

find_chromium() {
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

if path=$(find_chromium); then
  echo "$path"
  exit 0
fi

command -v apt-get >/dev/null 2>&1 ||
  die "chromium is not installed and apt-get is missing: install Chromium with your package manager, or put chromium on PATH"

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 ||
    die "chromium is not installed and installing it needs root: run 'apt-get install chromium' as root, or put chromium on PATH"
  SUDO=(sudo)
fi

log "chromium not found; installing Debian's chromium package"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -qq >&2 || die "apt-get update failed (are Debian's package mirrors reachable?)"
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends chromium >&2 ||
  die "apt-get install chromium failed"

path=$(find_chromium) || die "the chromium package is installed but chromium is not on PATH nor in /usr/bin"
log "installed $("$path" --version 2>/dev/null | head -n 1)"
echo "$path"
