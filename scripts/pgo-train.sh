#!/usr/bin/env bash
# The training run of a profile-guided build (see scripts/build-pgo.sh): runs an
# instrumented weir through what a gateway does, each process stopped with SIGTERM so that
# it writes its profile (`-Cprofile-generate`) on exit.
#
#   scripts/pgo-train.sh INSTRUMENTED_WEIR
#
# 1. The request path, one process per variant of scripts/per-request-site.sh: plaintext
#    HTTP/1.1 GETs and POSTs, the retry path, a rate limit, browser-sized heads (wrk), HTTP/1.1
#    over TLS and HTTP/2 over TLS (h2load), 4 s each.
# 2. A first load, changes and TLS handshakes: 3,000 TLS domains in the Ingress layout
#    (files written by `weir-bench propagation --keep-work`, certificates from its cache),
#    then 100 files modified, 100 added and 100 removed while weir watches, then 200
#    handshakes (h2load, 200 connections of 10 requests; the backend is gone: 502s).
# 3. A first load of Gateways with HTTPS listeners and HTTPRoutes (the `gateway` layout,
#    600 domains).
# Needs wrk, h2load, openssl, curl; weir-bench built (WEIR_BENCH, default
# target/release/weir-bench; scripts/build-pgo.sh passes the debug build). Bounded: about 2 min.
set -euo pipefail
cd "$(dirname "$0")/.."
weir=$(realpath "${1:?usage: $0 INSTRUMENTED_WEIR}")
bench=${WEIR_BENCH:-target/release/weir-bench}
. scripts/per-request-site.sh
. scripts/wait-ready.sh

# Stops weir with SIGTERM and waits for it: the profile is written as it exits.
stop() {
    kill -TERM "$1"
    wait "$1" 2>/dev/null || true
}

# 1. The request path.
start_backend
for variant in plain post retry limit headers https h2; do
    site "$variant"
    # shellcheck disable=SC2046 # weir_args is a word list
    "$weir" $(weir_args) >"$dir/weir.log" 2>&1 &
    w=$!
    wait_served
    wrk_load -- -d4s
    stop "$w"
    echo "pgo-train: $variant, $(grep -c . "$dir/weir.log" || true) log lines"
done

# Runs `weir-bench propagation` with the kept manifest directory and prints its path.
kept_dir() {
    local before after
    before=$(ls -d target/weir-bench/work/propagation-* 2>/dev/null || true)
    "$bench" propagation --changes 0 --idle-ms 0 --keep-work --weir "$weir" "$@" \
        --out "$out/results" >"$out/propagation.log" 2>&1 ||
        { tail -20 "$out/propagation.log" >&2; exit 1; }
    after=$(ls -d target/weir-bench/work/propagation-* 2>/dev/null || true)
    comm -13 <(echo "$before" | sort) <(echo "$after" | sort) | tail -1
}

# 2. A first load of Ingresses, changes while weir watches, handshakes.
manifests=$(kept_dir --domains 3000 --layout ingress)
[ -d "$manifests" ] || { echo "pgo-train: no manifest directory" >&2; exit 1; }
trap 'rm -rf "$manifests" "${gateways:-}"; cleanup' EXIT
admin=127.0.0.1:$(port)
https=$(port)
"$weir" run -c "$manifests" --admin "$admin" --ingress-http "127.0.0.1:$(port)" \
    --ingress-https "127.0.0.1:$https" --no-access-log >"$out/load.log" 2>&1 &
w=$!
wait_ready "$admin" "$w" "$out/load.log" 0.1
for i in $(seq 0 99); do
    # Modified: the path; added: a copy under new names; removed.
    sed 's|path: "/"|path: "/v2"|' "$manifests/d$i.yaml" >"$manifests/.m$i" &&
        mv "$manifests/.m$i" "$manifests/d$i.yaml"
    sed "s/\bd$((i + 100))\b/n$i/g; s/d$((i + 100))-tls/n$i-tls/; s/d$((i + 100))\.bench/n$i.bench/" \
        "$manifests/d$((i + 100)).yaml" >"$manifests/.n$i" && mv "$manifests/.n$i" "$manifests/n$i.yaml"
    rm -f "$manifests/d$((i + 200)).yaml"
done
sleep 2
curl -sf -o /dev/null "http://$admin/ready"
h2load -c 200 -n 2000 --connect-to="127.0.0.1:$https" https://d500.bench.test/ >"$out/handshakes.txt" 2>&1 || true
stop "$w"
rm -rf "$manifests"

# 3. A first load of Gateways.
gateways=$(kept_dir --domains 600 --layout gateway)
"$weir" run -c "$gateways" --admin "$admin" --no-access-log --no-watch >"$out/gw.log" 2>&1 &
w=$!
wait_ready "$admin" "$w" "$out/gw.log" 0.1
stop "$w"
rm -rf "$gateways"
echo "pgo-train: done"
