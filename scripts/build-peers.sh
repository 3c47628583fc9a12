#!/usr/bin/env bash
# Builds the peer host and the closed-loop generator of wasmCloud's throughput study into
# build/peers/, so that skillprof's traffic figures can be put beside theirs
# (cargo bench --bench peer_throughput, docs/traffic.md):
#
#   wasmtime-50.0.1   wasmtime-cli 50.0.1 as published, by cargo install (the wasmtime skillprof's own host
#                     links), with only what `wasmtime serve` needs: serve (and the async
#                     component model, which its code uses), cranelift, the pooling allocator
#                     and parallel compilation (~15 minutes on 2 cores)
#   hey-0.1.4         rakyll/hey v0.1.4 from the Go module proxy, the generator the study
#                     ran as `hey -z 20s -c 150` (~1 minute)
#
# Usage: scripts/build-peers.sh [--only wasmtime|hey]...
# A binary whose stamp names the same version and features is kept: a second run only checks.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/peers"
PREFIX=peers
source "$ROOT/scripts/common.sh"

WASMTIME_VERSION=50.0.1
# `serve` alone does not compile in 50.0.1: serve.rs uses component-model-async's futures.
WASMTIME_FEATURES=run,serve,component-model-async,cranelift,pooling-allocator,parallel-compilation
HEY_VERSION=v0.1.4

only=()
while [ $# -gt 0 ]; do
    case "$1" in
        --only)
            [ $# -ge 2 ] || die "--only needs wasmtime or hey"
            case "$2" in wasmtime | hey) only+=("$2") ;; *) die "--only $2: expected wasmtime or hey" ;; esac
            shift
            ;;
        -h | --help)
            header_help "$0"
            exit 0
            ;;
        *) die "unknown argument $1 (see $0 --help)" ;;
    esac
    shift
done
wanted() { [ ${#only[@]} -eq 0 ] || [[ " ${only[*]} " == *" $1 "* ]]; }
fresh() { [ -x "$1" ] && [ "$(cat "$1.stamp" 2>/dev/null)" = "$2" ]; }
mkdir -p "$OUT"

if wanted wasmtime; then
    file="$OUT/wasmtime-$WASMTIME_VERSION"
    stamp="wasmtime-cli $WASMTIME_VERSION $WASMTIME_FEATURES"
    if fresh "$file" "$stamp"; then
        step "$file is built ($stamp)"
    else
        need cargo "install Rust with scripts/setup.sh"
        step "building wasmtime-cli $WASMTIME_VERSION ($WASMTIME_FEATURES); ~15 minutes on 2 cores"
        # The repository's toolchain (rust-toolchain.toml) builds it; its own target folder keeps
        # the workspace's build cache untouched.
        (cd "$ROOT" && cargo install wasmtime-cli --version "$WASMTIME_VERSION" --locked \
            --no-default-features --features "$WASMTIME_FEATURES" \
            --root "$OUT/cargo-root" --target-dir "$OUT/target-wasmtime") \
            || die "cargo install wasmtime-cli $WASMTIME_VERSION failed"
        cp "$OUT/cargo-root/bin/wasmtime" "$file"
        echo "$stamp" >"$file.stamp"
        step "built $file"
    fi
fi

if wanted hey; then
    file="$OUT/hey-$HEY_VERSION"
    stamp="github.com/rakyll/hey $HEY_VERSION"
    if fresh "$file" "$stamp"; then
        step "$file is built ($stamp)"
    else
        need go "install Go (https://go.dev/dl), which builds hey from the Go module proxy"
        step "building hey $HEY_VERSION"
        GOBIN="$OUT/gobin" go install "github.com/rakyll/hey@$HEY_VERSION" \
            || die "go install github.com/rakyll/hey@$HEY_VERSION failed"
        cp "$OUT/gobin/hey" "$file"
        echo "$stamp" >"$file.stamp"
        step "built $file"
    fi
fi
