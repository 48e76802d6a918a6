#!/usr/bin/env bash
# Writes Prometheus file_sd target files for a running `make dev` stack: manager.json (the manager's
# metrics address) and dispatchers.json (every dispatcher pod process listening now, labelled with
# its namespace and pod), refreshed every 5 seconds until stopped.
#
#   hack/dashboard/targets.sh <dev dir, e.g. .dev> <manager metrics host:port> <output dir>
set -euo pipefail
dev=$1 manager=$2 out=$3
mkdir -p "$out"
printf '[{"targets":["%s"]}]\n' "$manager" >"$out/manager.json.tmp" && mv "$out/manager.json.tmp" "$out/manager.json"
while true; do
  entries=()
  for cfg in "$dev"/pods/pods/*/*/volumes/*/config.json; do
    [ -f "$cfg" ] || continue
    addr=$(grep -o '"metricsAddress": *"[^"]*"' "$cfg" | sed 's/.*"\([^"]*\)"$/\1/') || continue
    curl -fsS -o /dev/null --max-time 1 "http://$addr/metrics" || continue
    pod=$(basename "$(dirname "$(dirname "$(dirname "$cfg")")")")
    ns=$(basename "$(dirname "$(dirname "$(dirname "$(dirname "$cfg")")")")")
    entries+=("{\"targets\":[\"$addr\"],\"labels\":{\"namespace\":\"$ns\",\"pod\":\"$pod\"}}")
  done
  (IFS=,; echo "[${entries[*]}]") >"$out/dispatchers.json.tmp" && mv "$out/dispatchers.json.tmp" "$out/dispatchers.json"
  sleep 5
done
