#!/usr/bin/env bash
# Installs what skillprof needs to build and run, on a fresh machine of this kind.
# Idempotent: every step checks before it installs, so a second run takes seconds.
# Sourced by scripts/main.sh and scripts/test.sh; run it alone to prepare a machine for runs.
# What only the tests and benchmarks need, scripts/test.sh installs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"

# Versions that are known to work together here (see docs/building.md).
STABLE=1.99.0                 # aya 0.16 needs rustc >= 1.98, wasmtime 50 needs >= 1.97
NIGHTLY=nightly-2026-07-20    # builds the BPF programs (-Z build-std); LLVM 22
BPF_LINKER=0.10.0             # loads the nightly's own libLLVM; 0.11+ needs a system LLVM 21-23
COMPONENTIZE_PY=0.25.1        # turns the Python sample skill into a component
# The pydantic sample skill, as 2024's skills were built: pydantic-core's WASI wheel is cp312,
# so its componentize-py must bundle CPython 3.12 (0.14 to 0.17; pharia-skill pins 0.17).
COMPONENTIZE_PY_312=0.17.2
PHARIA_SKILL=0.20.0           # its published wheel ships wasi_wheels/pydantic_core-2.33.2-cp312-*.whl
PYDANTIC=2.11.7               # what pharia-skill 0.20.0 pins, with its pure-Python dependencies:
PYDANTIC_DEPS=(annotated-types==0.7.0 typing-extensions==4.14.1 typing-inspection==0.4.1)
# l_execute_all's load engine, with the versions of its engine parts it was verified with.
LOCUST=2.47.0
LOCUST_DEPS=(gevent==26.9.0 geventhttpclient==2.6.1 pyzmq==27.3.0)

PREFIX=setup
source "$ROOT/scripts/common.sh"

need rustup "install it from https://rustup.rs (the toolchains below come through it)"
need cc "the host build links with a C compiler (as root: apt-get install gcc)"
need python3 "the sample skills are built by componentize-py (as root: apt-get install python3)"
python3 -c 'import venv, ensurepip' 2>/dev/null \
    || die "python3-venv is missing: componentize-py and Locust live in venvs (as root: apt-get install python3-venv)"

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
if ! "$BUILD/venv-py312/bin/componentize-py" --version 2>/dev/null | grep -q "$COMPONENTIZE_PY_312"; then
    step "componentize-py $COMPONENTIZE_PY_312 (CPython 3.12) in build/venv-py312"
    mkdir -p "$BUILD"
    python3 -m venv "$BUILD/venv-py312"
    "$BUILD/venv-py312/bin/pip" install --quiet "componentize-py==$COMPONENTIZE_PY_312"
fi
SITE="$BUILD/py312-site"
SITE_DONE="$SITE/.installed-pharia-skill-$PHARIA_SKILL-pydantic-$PYDANTIC"
if [ ! -f "$SITE_DONE" ]; then
    step "pydantic $PYDANTIC and pharia-skill $PHARIA_SKILL's pydantic-core WASI wheel in build/py312-site"
    rm -rf "$SITE" "$BUILD/wheels"
    "$BUILD/venv-py312/bin/pip" download --quiet --no-deps "pharia-skill==$PHARIA_SKILL" \
        -d "$BUILD/wheels"
    "$BUILD/venv-py312/bin/pip" install --quiet --no-deps --target "$SITE" \
        "pydantic==$PYDANTIC" "${PYDANTIC_DEPS[@]}"
    # A wheel is a zip: the inner one unpacks into the same folder, as pip would install it
    # if pip could install a wasm32 wheel.
    "$BUILD/venv-py312/bin/python" - "$BUILD/wheels/pharia_skill-$PHARIA_SKILL-py3-none-any.whl" "$SITE" <<'PY'
import io, sys, zipfile
outer = zipfile.ZipFile(sys.argv[1])
[inner] = [n for n in outer.namelist() if n.startswith("wasi_wheels/pydantic_core-")]
zipfile.ZipFile(io.BytesIO(outer.read(inner))).extractall(sys.argv[2])
print(f"  {inner}")
PY
    touch "$SITE_DONE"
fi
if ! "$BUILD/venv-locust/bin/locust" --version 2>/dev/null | grep -q "locust $LOCUST "; then
    step "locust $LOCUST (l_execute_all's master and workers) in build/venv-locust"
    mkdir -p "$BUILD"
    python3 -m venv "$BUILD/venv-locust"
    "$BUILD/venv-locust/bin/pip" install --quiet "locust==$LOCUST" "${LOCUST_DEPS[@]}"
fi
# `run --stacks` names libc's frames (its memcpy and malloc, where much of a compile faults)
# from libc's separate debug file; without it they read as [libc.so.6].
if ! installed libc6-dbg; then
    if [ "$(id -u)" -eq 0 ]; then
        step "libc6-dbg (libc's symbols, for run --stacks)"
        apt_install libc6-dbg
    else
        step "libc6-dbg missing: run --stacks names libc's frames only by library (as root: apt-get install libc6-dbg)"
    fi
fi
# skillhost --malloc jemalloc preloads the system's jemalloc (the memory_options benchmark
# and the host tests use it).
if ! installed libjemalloc2; then
    if [ "$(id -u)" -eq 0 ]; then
        step "libjemalloc2 (for skillhost --malloc jemalloc)"
        apt_install libjemalloc2
    else
        step "libjemalloc2 missing: skillhost --malloc jemalloc fails (as root: apt-get install libjemalloc2)"
    fi
fi
step "toolchains ready"
