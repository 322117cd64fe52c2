# Sourced by scripts/instructions-callgrind.sh, scripts/syscalls-per-request.sh and
# scripts/cpu-per-request.sh: one
# plaintext Ingress host in front of `weir-bench backend`, per configuration variant, and
# the count of the requests weir proxied. Expects `bench` (the weir-bench binary) set;
# sets `out` (a temporary directory, removed at exit) and `pids` (killed at exit).

out=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$out"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# start_backend [LAUNCHER ...]: the backend on a free port (in `backend_port`), run
# through LAUNCHER (e.g. `taskset -c 1`) when given; answers of BACKEND_SIZE bytes
# (default 0).
start_backend() {
    backend_port=$(port)
    "$@" "$bench" backend --listen "127.0.0.1:$backend_port" --size "${BACKEND_SIZE:-0}" >"$out/backend.log" 2>&1 &
    pids+=($!)
}

# site VARIANT: writes $out/VARIANT/manifests (the Ingress with the variant's
# annotations: plain none, retry `proxy-next-upstream: error timeout http_503` — the
# retry path, no retry made — and limit `limit-rps` far above the load) and picks the
# ports `http`, `https` and `admin`; sets `dir`.
site() {
    local annotations
    case $1 in
        plain) annotations="{}" ;;
        retry) annotations='{nginx.ingress.kubernetes.io/proxy-next-upstream: "error timeout http_503"}' ;;
        limit) annotations='{nginx.ingress.kubernetes.io/limit-rps: "100000000"}' ;;
        post) annotations="{}" ;;
        h2 | https) annotations="{}" ;;
        headers) annotations="{}" ;;
        *) echo "unknown variant $1" >&2; exit 2 ;;
    esac
    dir="$out/$1"
    mkdir -p "$dir/manifests"
    # `post`: the plain site, loaded with POSTs of a 1 KiB body (Content-Length).
    wrk_script=
    if [ "$1" = post ]; then
        wrk_script="$dir/post.lua"
        printf 'wrk.method = "POST"\nwrk.body = string.rep("x", 1024)\n' >"$wrk_script"
    fi
    # `h2`: the plain site over TLS (a self-signed P-256 certificate for site.test),
    # loaded by h2load (HTTP/2, 16 connections of 32 concurrent streams, as the bench's
    # `h2-c16-m32`). `https`: the same site loaded by h2load over HTTP/1.1 (`--h1`, 16
    # keep-alive connections, one request at a time on each).
    tls=
    if [ "$1" = h2 ] || [ "$1" = https ]; then
        openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
            -keyout "$dir/key.pem" -out "$dir/cert.pem" -subj /CN=site.test \
            -addext subjectAltName=DNS:site.test 2>/dev/null
        cat >"$dir/manifests/secret.yaml" <<EOF
apiVersion: v1
kind: Secret
metadata: {name: site-tls, namespace: default}
type: kubernetes.io/tls
data:
  tls.crt: $(base64 -w0 "$dir/cert.pem")
  tls.key: $(base64 -w0 "$dir/key.pem")
EOF
        tls='  tls: [{hosts: [site.test], secretName: site-tls}]'
    fi
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
$tls
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
}

# The arguments of `weir run` for the site.
weir_args() {
    echo run -c "$dir/manifests" --admin "127.0.0.1:$admin" \
        --ingress-http "127.0.0.1:$http" --ingress-https "127.0.0.1:$https" --no-access-log
}

# serve_pinned VARIANT: writes the variant's site, starts `$weir` on it pinned to CPU 0
# (its pid in `w`), waits until it serves and warms it up with 2 s of wrk from CPU 1.
serve_pinned() {
    site "$1"
    # shellcheck disable=SC2046 # weir_args is a word list
    taskset -c 0 "$weir" $(weir_args) >"$dir/weir.log" 2>&1 &
    w=$!
    pids+=("$w")
    wait_served
    wrk_load taskset -c 1 -- -d2s
}

# Waits (up to 60 s) for the site to answer 200 (over TLS for `h2` and `https`).
wait_served() {
    local url="http://127.0.0.1:$http/" resolve=()
    if [ "$variant" = h2 ] || [ "$variant" = https ]; then
        url="https://site.test:$https/"
        resolve=(-k --resolve "site.test:$https:127.0.0.1")
    fi
    for _ in $(seq 1 300); do
        [ "$(curl -s "${resolve[@]}" -o /dev/null -w '%{http_code}' -H 'host: site.test' "$url")" = 200 ] && return
        sleep 0.2
    done
}

# The 2xx answers weir counted (weir_requests_total).
requests() { curl -s "http://127.0.0.1:$admin/metrics" | awk '/^weir_requests_total.*class="2xx"/ {s += $2} END {print s + 0}'; }

# wrk_load [LAUNCHER ...] -- WRK_ARGS: wrk against the site. Only proxied 2xx answers
# count: it stops the script when wrk saw any other. (wrk adds its own Host header unless
# the one given is spelled `Host`; weir answers a request with two Host headers 400,
# which is how an earlier version of these scripts measured 400s.)
wrk_load() {
    local launcher=()
    while [ "$1" != -- ]; do launcher+=("$1"); shift; done
    shift
    if [ "$variant" = h2 ] || [ "$variant" = https ]; then
        # h2load takes the duration as -D SECONDS; the callers give wrk's -dNs.
        local secs=${1#-d}
        secs=${secs%s}
        local shape=(-m32)
        [ "$variant" = https ] && shape=(--h1 -m1)
        "${launcher[@]}" h2load -t1 -c16 "${shape[@]}" -D "$secs" --connect-to="127.0.0.1:$https" \
            https://site.test/ >"$dir/h2load.txt"
        if ! grep -q ' 0 failed, 0 errored' "$dir/h2load.txt" ||
            grep -Eq ' [1-9][0-9]* [345]xx' "$dir/h2load.txt"; then
            cat "$dir/h2load.txt" >&2
            echo "$variant: h2load saw failures or answers other than 2xx" >&2
            exit 1
        fi
        return
    fi
    # `headers`: the plain site, each request with the fields a browser sends (11 more).
    local fields=()
    if [ "$variant" = headers ]; then
        fields=(-H 'User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0'
            -H 'Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8'
            -H 'Accept-Language: en-US,en;q=0.5' -H 'Accept-Encoding: gzip, deflate, br, zstd'
            -H 'Cookie: session=4f2a9c; theme=dark' -H 'Upgrade-Insecure-Requests: 1'
            -H 'Sec-Fetch-Dest: document' -H 'Sec-Fetch-Mode: navigate' -H 'Sec-Fetch-Site: none'
            -H 'Sec-Fetch-User: ?1' -H 'Priority: u=0, i')
    fi
    "${launcher[@]}" wrk -t1 -c16 ${wrk_script:+-s "$wrk_script"} "$@" -H 'Host: site.test' "${fields[@]}" "http://127.0.0.1:$http/" >"$dir/wrk.txt"
    if grep -q 'Non-2xx' "$dir/wrk.txt"; then
        cat "$dir/wrk.txt" >&2
        echo "$variant: wrk saw answers other than 2xx/3xx" >&2
        exit 1
    fi
}
