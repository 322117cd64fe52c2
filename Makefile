# One entry point for humans and CI. `make test` is the whole test suite.
CARGO ?= cargo

.PHONY: test lint unit k8s-env previous-release quickstart echo bless conformance readme-check fuzz

test: lint k8s-env previous-release unit

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

unit:
	$(CARGO) test --workspace

# The Kubernetes-mode tests start a real kube-apiserver + etcd (scripts/k8s-env). This
# builds/caches them once (about 9 minutes the first time, then 0.1 s) and apt-installs
# etcd-server if missing.
k8s-env:
	scripts/k8s-env install

# Earlier releases' `weir` binaries, for the Kubernetes test of data planes older than
# their controller: each built once from its commit (about 5 minutes), then cached.
previous-release:
	scripts/previous-release build

# Regenerate the translator's golden files after an intended change.
bless:
	WEIR_BLESS=1 $(CARGO) test -p weir-translate --test golden

quickstart:
	$(CARGO) run --release -- run -c examples/quickstart

echo:
	$(CARGO) run --release -- echo

# The upstream Gateway API conformance suite (GATEWAY-HTTP, -TLS, -TCP profiles) against `weir
# controller` on a local kube-apiserver; see CONFORMANCE.md. Needs root (network
# namespaces) and Go; the suite's builds are cached in ~/.cache/weir/conformance.
conformance: k8s-env
	scripts/conformance run

# The README's first command on a fresh clone (what CI runs after `make test`).
readme-check:
	scripts/readme-check

# Every fuzz target over its corpus and a fixed-seed run (what CI runs; fuzz/README.md).
fuzz:
	scripts/fuzz
