# Sourced by the setup scripts that install a tool from a Debian package (setup-chromium.sh,
# setup-prometheus.sh). The caller defines log and die (with its own prefix) and find_tool (prints
# the tool's path, or fails), then calls
#
#   ensure_debian_tool TOOL PACKAGE
#
# which prints the tool's path on stdout: at once when find_tool finds it, else after
# `apt-get update` and `apt-get install -y --no-install-recommends PACKAGE` (as root, or with sudo).
# Progress goes to stderr.

ensure_debian_tool() {
  local tool=$1 package=$2 path
  if path=$(find_tool); then
    echo "$path"
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 ||
    die "$tool is not installed and apt-get is missing: install $package with your package manager, or put $tool on PATH"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 ||
      die "$tool is not installed and installing it needs root: run 'apt-get install $package' as root, or put $tool on PATH"
    sudo=(sudo)
  fi
  log "$tool not found; installing Debian's $package package"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq >&2 || die "apt-get update failed (are Debian's package mirrors reachable?)"
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "$package" >&2 ||
    die "apt-get install $package failed"
  path=$(find_tool) || die "the $package package is installed but $tool is not on PATH nor in /usr/bin"
  log "installed $("$path" --version 2>&1 | head -n 1)"
  echo "$path"
}
