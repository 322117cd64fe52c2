#!/usr/bin/env bash
# System calls that weir makes per proxied request (strace -c), per configuration
# variant: the kernel-side companion of scripts/instructions-callgrind.sh, which counts
# user-space instructions only. Counts, unlike req/s, do not drift with other load on a
# shared machine.
#
#   scripts/syscalls-per-request.sh WEIR_BINARY [VARIANT ...]
#
# VARIANT: plain, retry, limit, as in instructions-callgrind.sh (default: plain retry).
# For each: weir (pinned to CPU 0) serves one plaintext Ingress host in front of
# `weir-bench backend`; wrk warms it up, strace attaches to every weir thread, wrk (on
# CPU 1) sends 5 s of HTTP/1.1 keep-alive load over 16 connections, and the calls are
# divided by the requests weir counted in that window (weir_requests_total). Needs
# strace, wrk, curl, taskset; WEIR_BENCH (default target/release/weir-bench).
set -euo pipefail
weir=$(realpath "${1:?usage: $0 WEIR_BINARY [plain|retry|limit ...]}")
shift
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(plain retry)
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
taskset -c 1 "$bench" backend --listen "127.0.0.1:$backend_port" >"$out/backend.log" 2>&1 &
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
    taskset -c 0 "$weir" run -c "$dir/manifests" --admin "127.0.0.1:$admin" \
        --ingress-http "127.0.0.1:$http" --ingress-https "127.0.0.1:$https" --no-access-log \
        >"$dir/weir.log" 2>&1 &
    w=$!
    pids+=("$w")
    for _ in $(seq 1 300); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' -H 'host: site.test' "http://127.0.0.1:$http/")" = 200 ] && break
        sleep 0.1
    done
    requests() { curl -s "http://127.0.0.1:$admin/metrics" | awk '/^weir_requests_total.*class="2xx"/ {s += $2} END {print s + 0}'; }
    taskset -c 1 wrk -t1 -c16 -d2s -H 'Host: site.test' "http://127.0.0.1:$http/" >/dev/null
    timeout 20 strace -c -f -p "$w" -o "$dir/strace.txt" 2>/dev/null &
    st=$!
    sleep 1
    r0=$(requests)
    taskset -c 1 wrk -t1 -c16 -d5s -H 'Host: site.test' "http://127.0.0.1:$http/" >"$dir/wrk.txt"
    # Only proxied 2xx answers count. (wrk adds its own Host header unless the one given
    # is spelled `Host`; weir answers a request with two Host headers 400, which is how
    # an earlier version of this script measured 400s.)
    if grep -q 'Non-2xx' "$dir/wrk.txt"; then
        cat "$dir/wrk.txt" >&2
        echo "$variant: wrk saw answers other than 2xx/3xx" >&2
        exit 1
    fi
    r1=$(requests)
    kill -INT "$st" 2>/dev/null || true
    wait "$st" 2>/dev/null || true
    kill "$w"
    wait "$w" 2>/dev/null || true
    n=$((r1 - r0))
    calls=$(awk '$NF == "total" {print $(NF-2) + 0}' "$dir/strace.txt")
    [ "$n" -gt 0 ] && [ -n "$calls" ] || { echo "$variant: no measurement (see $dir)" >&2; exit 1; }
    awk -v v="$variant" -v n="$n" -v c="$calls" \
        'BEGIN {printf "%-6s %8d requests  %9d system calls  %6.2f per request\n", v, n, c, c / n}'
    # The calls that make up the count, most frequent first.
    awk '$1 ~ /^[0-9.]+$/ && $NF != "total" {print "         " $NF, $4}' "$dir/strace.txt" |
        sort -k2 -nr | head -5
done
