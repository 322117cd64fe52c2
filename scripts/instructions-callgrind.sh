#!/usr/bin/env bash
# Instructions that weir executes per proxied request, counted by valgrind (callgrind):
# exact and deterministic where `perf stat` has no hardware counters (as on this
# project's VM) and where req/s and CPU seconds drift with the machine's other load.
#
#   scripts/instructions-callgrind.sh WEIR_BINARY [VARIANT ...]
#
# VARIANT: plain (no policy), post (plain, POSTs of a 1 KiB body), retry (ingress-nginx `proxy-next-upstream: error timeout
# http_503` — the retry path, no retry made), limit (`limit-rps` far above the load),
# h2 (plain, over TLS with HTTP/2: h2load, 16 connections × 32 streams; needs h2load
# and openssl), https (plain, HTTP/1.1 over TLS: h2load --h1, 16 keep-alive connections),
# headers (plain, each request with 11 more fields, as a browser sends).
# Default: all three. For each: weir serves one plaintext Ingress host in front of
# `weir-bench backend`; wrk warms it up, callgrind's counters are zeroed, wrk sends
# HTTP/1.1 keep-alive load (16 connections) for 10 s, the counters are dumped, and the
# instructions are divided by the requests weir counted in that window (its
# weir_requests_total). Needs valgrind, wrk and curl; target/release/weir-bench built.
# WEIR_CALLGRIND_KEEP=DIR keeps each variant's profile of the window as DIR/VARIANT.out
# (for `callgrind_annotate --inclusive=yes`; per function, as the binary's symbols allow).
set -euo pipefail
weir=$(realpath "${1:?usage: $0 WEIR_BINARY [plain|retry|limit ...]}")
shift
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(plain retry limit)
bench=${WEIR_BENCH:-target/release/weir-bench}
. "$(dirname "$0")/per-request-site.sh"
start_backend

for variant in "${variants[@]}"; do
    site "$variant"
    # shellcheck disable=SC2046 # weir_args is a word list
    valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind.out" --dump-instr=no \
        "$weir" $(weir_args) >"$dir/weir.log" 2>&1 &
    vg=$!
    pids+=("$vg")
    wait_served
    wrk_load -- -d3s
    callgrind_control -z "$vg" >/dev/null
    r0=$(requests)
    wrk_load -- -d10s
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
    if [ -n "${WEIR_CALLGRIND_KEEP:-}" ]; then
        mkdir -p "$WEIR_CALLGRIND_KEEP"
        for f in "$dir"/callgrind.out.*; do
            if [ "$(awk '/^summary:/ {print $2}' "$f")" = "$ir" ]; then
                cp "$f" "$WEIR_CALLGRIND_KEEP/$variant.out"
            fi
        done
    fi
    awk -v v="$variant" -v n="$n" -v ir="$ir" \
        'BEGIN {printf "%-6s %8d requests  %12.0f instructions  %8.0f per request\n", v, n, ir, ir / n}'
done
