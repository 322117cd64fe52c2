#!/usr/bin/env bash
# A profile-guided (PGO) release build of weir: the release profile (fat LTO, one codegen
# unit) compiled again with the branch and call counts of a training run, so that LLVM
# lays out, inlines and unrolls for the paths a gateway takes (BENCHMARKS.md, "Session 43:
# a profile-guided build").
#
#   scripts/build-pgo.sh            # writes target/pgo/release/weir
#
# Steps: an instrumented build (`-Cprofile-generate`, in target/pgo-gen), the training run
# (scripts/pgo-train.sh, about 2 min, with a debug weir-bench), the profiles merged into
# target/pgo/weir.profdata, the optimized build (`-Cprofile-use`, in target/pgo). Two
# release builds: about 20 min on 2 cores. Needs llvm-profdata of the LLVM that rustc is
# built with (`rustc -vV`; Debian: `apt install llvm-22`), or LLVM_PROFDATA=PATH; and
# what scripts/pgo-train.sh needs.
# The result behaves as `cargo build --release` (same code, same tests); only its speed
# differs. Code the training does not reach is optimized for size, not removed.
set -euo pipefail
cd "$(dirname "$0")/.."
major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
profdata=${LLVM_PROFDATA:-}
if [ -z "$profdata" ]; then
    for c in "llvm-profdata-$major" "/usr/lib/llvm-$major/bin/llvm-profdata" llvm-profdata; do
        if command -v "$c" >/dev/null && "$c" --version | grep -q "LLVM version $major\."; then
            profdata=$(command -v "$c")
            break
        fi
    done
fi
[ -n "$profdata" ] || {
    echo "build-pgo: no llvm-profdata of LLVM $major (rustc's); install llvm-$major or set LLVM_PROFDATA" >&2
    exit 1
}
root=$(pwd)
raw="$root/target/pgo-gen/profiles"
rm -rf "$raw"
mkdir -p "$raw" target/pgo
RUSTFLAGS="-Cprofile-generate=$raw" cargo build --release -p weir --target-dir target/pgo-gen
# The training drives weir with wrk and h2load; weir-bench only writes its manifests and
# checks the first loads, so its debug build does (the one `make test` leaves; a release
# build with fat LTO would add about 5 min).
cargo build -p weir-bench
# Build scripts compiled with the flag wrote profiles of their own during the build.
rm -rf "$raw"
WEIR_BENCH=target/debug/weir-bench scripts/pgo-train.sh target/pgo-gen/release/weir
"$profdata" merge -o "$root/target/pgo/weir.profdata" "$raw"
RUSTFLAGS="-Cprofile-use=$root/target/pgo/weir.profdata" \
    cargo build --release -p weir --target-dir target/pgo
echo "build-pgo: target/pgo/release/weir"
