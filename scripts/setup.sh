#!/usr/bin/env bash
# Installs what skillprof needs to build and run, on a fresh machine of this kind.
# Idempotent: every step checks before it installs, so a second run takes seconds.
# Sourced by scripts/main.sh and scripts/test.sh; run it alone to prepare a machine.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"

# Versions that are known to work together here (see the README's "Toolchains").
STABLE=1.99.0                 # aya 0.16 needs rustc >= 1.98, wasmtime 50 needs >= 1.97
NIGHTLY=nightly-2026-07-20    # builds the BPF programs (-Z build-std); LLVM 22
BPF_LINKER=0.10.0             # loads the nightly's own libLLVM; 0.11+ needs a system LLVM 21-23
COMPONENTIZE_PY=0.25.1        # turns the Python sample skill into a component

step() { printf '\033[1msetup:\033[0m %s\n' "$*"; }

# RUSTUP_AUTO_INSTALL=0 on these machines, so rust-toolchain.toml alone installs nothing.
step "rust $STABLE (+ wasm32-wasip2) and $NIGHTLY (+ rust-src)"
rustup toolchain install "$STABLE" --profile minimal --component clippy,rustfmt \
    --target wasm32-wasip2 >/dev/null 2>&1 \
    || rustup toolchain install "$STABLE" --profile minimal --component clippy,rustfmt --target wasm32-wasip2
rustup toolchain install "$NIGHTLY" --profile minimal --component rust-src >/dev/null 2>&1 \
    || rustup toolchain install "$NIGHTLY" --profile minimal --component rust-src

if ! bpf-linker --version 2>/dev/null | grep -q "$BPF_LINKER"; then
    step "bpf-linker $BPF_LINKER (about 2 minutes)"
    cargo "+$NIGHTLY" install "bpf-linker@$BPF_LINKER" --locked --force
fi

if ! "$BUILD/venv/bin/componentize-py" --version 2>/dev/null | grep -q "$COMPONENTIZE_PY"; then
    step "componentize-py $COMPONENTIZE_PY in build/venv"
    mkdir -p "$BUILD"
    python3 -m venv "$BUILD/venv"
    "$BUILD/venv/bin/pip" install --quiet "componentize-py==$COMPONENTIZE_PY"
fi
if [ ! -x "$BUILD/bin/hey" ]; then
    step "hey (HTTP load generator for the host benchmark) in build/bin"
    GOBIN="$BUILD/bin" go install github.com/rakyll/hey@v0.1.4
fi
# The report test renders report.html in headless Chromium (Debian's; its own download of a
# browser is refused on this network). Only for the tests, but installed here with the rest.
if ! command -v chromium >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ]; then
        step "chromium (Debian's, for the report test)"
        apt-get install -y --no-install-recommends chromium >/dev/null \
            || { apt-get update >/dev/null && apt-get install -y --no-install-recommends chromium >/dev/null; }
    else
        step "chromium missing: the report test will fail without it (as root: apt-get install chromium)"
    fi
fi
step "toolchains ready"
