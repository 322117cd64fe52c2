#!/usr/bin/env bash
# System calls that weir makes per proxied request (strace -c), per configuration
# variant: the kernel-side companion of scripts/instructions-callgrind.sh, which counts
# user-space instructions only. Counts, unlike req/s, do not drift with other load on a
# shared machine.
#
#   scripts/syscalls-per-request.sh WEIR_BINARY [VARIANT ...]
#
# VARIANT: plain, post, retry, limit, as in instructions-callgrind.sh (default: plain retry).
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
. "$(dirname "$0")/per-request-site.sh"
start_backend taskset -c 1

for variant in "${variants[@]}"; do
    serve_pinned "$variant"
    timeout 20 strace -c -f -p "$w" -o "$dir/strace.txt" 2>/dev/null &
    st=$!
    sleep 1
    r0=$(requests)
    wrk_load taskset -c 1 -- -d5s
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
