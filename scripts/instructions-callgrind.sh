#!/usr/bin/env bash
# Instructions that weir executes per proxied request, counted by valgrind (callgrind):
# exact and deterministic where `perf stat` has no hardware counters (as on this
# project's VM) and where req/s and CPU seconds drift with the machine's other load.
#
#   scripts/instructions-callgrind.sh WEIR_BINARY [VARIANT ...]
#
# VARIANT: plain (no policy), retry (ingress-nginx `proxy-next-upstream: error timeout
# http_503` — the retry path, no retry made), limit (`limit-rps` far above the load).
# Default: all three. For each: weir serves one plaintext Ingress host in front of
# `weir-bench backend`; wrk warms it up, callgrind's counters are zeroed, wrk sends
# HTTP/1.1 keep-alive load (16 connections) for 10 s, the counters are dumped, and the
# instructions are divided by the requests weir counted in that window (its
# weir_requests_total). Needs valgrind, wrk and curl; target/release/weir-bench built.
set -euo pipefail
weir=$(realpath "${1:?usage: $0 WEIR_BINARY [plain|retry|limit ...]}")
shift
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(plain retry limit)
bench=${WEIR_BENCH:-target/release/weir-bench}
out=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$out"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
backend_port=$(port)
"$bench" backend --listen "127.0.0.1:$backend_port" >"$out/backend.log" 2>&1 &
pids+=($!)

for variant in "${variants[@]}"; do
    case $variant in
        plain) annotations="{}" ;;
        retry) annotations='{nginx.ingress.kubernetes.io/proxy-next-upstream: "error timeout http_503"}' ;;
        limit) annotations='{nginx.ingress.kubernetes.io/limit-rps: "100000000"}' ;;
        *) echo "unknown variant $variant" >&2; exit 2 ;;
    esac
    dir="$out/$variant"
    mkdir -p "$dir/manifests"
    cat >"$dir/manifests/site.yaml" <<EOF
apiVersion: weir.dev/v1alpha1
kind: Backend
metadata: {name: be, namespace: default}
spec:
  endpoints: ["127.0.0.1:$backend_port"]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: site, namespace: default, annotations: $annotations}
spec:
  rules:
  - host: site.test
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {resource: {apiGroup: weir.dev, kind: Backend, name: be}}}
EOF
    http=$(port)
    https=$(port)
    while [ "$https" = "$http" ]; do https=$(port); done
    admin=$(port)
    valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" --dump-instr=no \
        "$weir" run -c "$dir/manifests" --admin "127.0.0.1:$admin" \
        --ingress-http "127.0.0.1:$http" --ingress-https "127.0.0.1:$https" --no-access-log \
        >"$dir/weir.log" 2>&1 &
    vg=$!
    pids+=("$vg")
    for _ in $(seq 1 300); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'host: site.test' "http://127.0.0.1:$http/")" = 200 ] && break
        sleep 0.2
    done
    requests() { curl -s "http://127.0.0.1:$admin/metrics" | awk '/^weir_requests_total.*class="2xx"/ {s += $2} END {print s + 0}'; }
    wrk -t1 -c16 -d3s -H 'Host: site.test' "http://127.0.0.1:$http/" >/dev/null
    callgrind_control -z "$vg" >/dev/null
    r0=$(requests)
    wrk -t1 -c16 -d10s -H 'Host: site.test' "http://127.0.0.1:$http/" >"$dir/wrk.txt"
    # Only proxied 2xx answers count. (wrk adds its own Host header unless the one given
    # is spelled `Host`; weir answers a request with two Host headers 400, which is how
    # an earlier version of this script measured 400s.)
    if grep -q 'Non-2xx' "$dir/wrk.txt"; then
        cat "$dir/wrk.txt" >&2
        echo "$variant: wrk saw answers other than 2xx/3xx" >&2
        exit 1
    fi
    r1=$(requests)
    callgrind_control -d "$vg" >/dev/null
    kill "$vg"
    wait "$vg" 2>/dev/null || true
    n=$((r1 - r0))
    # The dump made after zeroing holds the window's instructions (the final dump at exit
    # holds only what came after it).
    ir=$(for f in "$dir"/callgrind.out.*; do
        awk '/^summary:/ {print $2}' "$f"
    done | sort -n | tail -1)
    [ "$n" -gt 0 ] && [ -n "$ir" ] || { echo "$variant: no measurement (see $dir)" >&2; exit 1; }
    awk -v v="$variant" -v n="$n" -v ir="$ir" \
        'BEGIN {printf "%-6s %8d requests  %12.0f instructions  %8.0f per request\n", v, n, ir, ir / n}'
done
