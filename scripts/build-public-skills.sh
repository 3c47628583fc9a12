#!/usr/bin/env bash
# Builds components nobody here wrote, from their published sources, into build/public/, so
# that skillprof's answers for "your skills" are checked on skills that are not its own
# (docs/own-skills.md gives their answers, skills/public/ the profiles that serve them):
#
#   wstd_http_server.wasm   wstd 0.6.8's examples/http_server.rs (cargo fetches it), a Rust
#                           wasi:http/proxy handler: POST / answers "Hello, wasi:http/proxy
#                           world!", /echo echoes the body (~1 minute on 2 cores)
#   cpy_http_echo.wasm      componentize-py 0.17.2's examples/http/app.py (its published sdist), a
#                           Python wasi:http/proxy handler: POST /echo streams the body back
#                           through an asyncio loop on WASI's poll (~20 s)
#   js_http_echo.wasm       skills/js_echo/echo.js, a JavaScript wasi:http/proxy handler, by
#                           npm's @bytecodealliance/componentize-js 0.23.0 (StarlingMonkey):
#                           POST /echo answers its JSON body with a greeting (~1 minute, most
#                           of it npm install; needs npm)
#
# Needs scripts/setup.sh's toolchain (the wasm32-wasip2 target, build/venv-py312's
# componentize-py 0.17.2). Each package is checked against its SHA-256 before it is used, and
# a component whose stamp names the same package is kept: a second run only checks.
#
# Usage: scripts/build-public-skills.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/public"
PREFIX=public-skills
source "$ROOT/scripts/common.sh"

case "${1:-}" in
    -h | --help)
        header_help "$0"
        exit 0
        ;;
    "") ;;
    *) die "unknown argument $1 (see $0 --help)" ;;
esac

WSTD_VERSION=0.6.8
WSTD=wstd-$WSTD_VERSION
# The package's checksum, as cargo's registry index gives it (and cargo checks the download).
WSTD_SHA256=29b52936db10a79bb724dadd1c2c3aac958e8229dcb1f1c7f2b7044ca9fc6a3a
CPY_VERSION=0.17.2
CPY=componentize_py-$CPY_VERSION
CPY_SHA256=f3149d93388b8c4cd6807a0a5c8ecce83d647ee21a92b35043111df6746e76e8
COMPONENTIZE_PY="$ROOT/build/venv-py312/bin/componentize-py"

need cargo "run scripts/setup.sh"
need curl "apt-get install curl"
[ -x "$COMPONENTIZE_PY" ] || die "$COMPONENTIZE_PY is missing: run scripts/setup.sh"
mkdir -p "$OUT/src"

# `unpack URL SHA256 ARCHIVE FOLDER`: downloads URL to ARCHIVE unless it already has that hash,
# and unpacks it afresh into $OUT/src, where it makes FOLDER.
unpack() {
    local url=$1 sum=$2 archive=$3 folder=$4
    if ! echo "$sum  $archive" | sha256sum --check --status 2>/dev/null; then
        step "downloading $url"
        curl -fsSL --retry 3 -o "$archive.part" "$url" || die "downloading $url failed"
        echo "$sum  $archive.part" | sha256sum --check --status ||
            die "$url: SHA-256 $(sha256sum "$archive.part" | cut -d' ' -f1), expected $sum"
        mv "$archive.part" "$archive"
    fi
    rm -rf "${OUT:?}/src/$folder"
    tar -xzf "$archive" -C "$OUT/src"
}

# `crate_source NAME VERSION SHA256 FOLDER`: the published source of crate NAME VERSION, which
# cargo fetches by name into its own cache through a throwaway package that depends on it,
# copied afresh into $OUT/src/FOLDER; the checksum cargo recorded must be SHA256.
crate_source() {
    local name=$1 version=$2 sum=$3 folder=$4 probe="$OUT/src/fetch-$1"
    mkdir -p "$probe/src"
    : >"$probe/src/lib.rs"
    printf '[package]\nname = "fetch-%s"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\n%s = "=%s"\n\n[workspace]\n' \
        "$name" "$name" "$version" >"$probe/Cargo.toml"
    step "fetching $name $version with cargo"
    (cd "$probe" && cargo fetch --quiet) || die "cargo fetch of $name $version failed"
    grep -A3 "^name = \"$name\"\$" "$probe/Cargo.lock" | grep -q "^checksum = \"$sum\"\$" ||
        die "$name $version: cargo's checksum is not $sum"
    local source
    source=$(cargo metadata --quiet --format-version 1 --manifest-path "$probe/Cargo.toml" |
        python3 -c 'import json, os, sys
name, version = sys.argv[1:]
for package in json.load(sys.stdin)["packages"]:
    if package["name"] == name and package["version"] == version:
        print(os.path.dirname(package["manifest_path"]))' "$name" "$version")
    [ -d "$source" ] || die "cargo fetched $name $version but names no folder of its source"
    rm -rf "${OUT:?}/src/$folder"
    cp -r "$source" "$OUT/src/$folder"
}

# `sdist_link NAME VERSION FILE`: where pip's configured index keeps NAME VERSION's sdist FILE,
# as pip itself finds it by name. pip cannot download this one itself: `pip download` prepares
# an sdist's metadata, and componentize-py's needs a git dependency of its Rust build (tried
# 2026-12-06: maturin's cargo metadata could not reach it). So pip names the link, curl
# fetches it, and its SHA-256 is checked.
sdist_link() {
    local name=$1 version=$2 file=$3 link
    link=$("$ROOT/build/venv-py312/bin/pip" download -vvv --no-deps --no-binary "$name" \
        "$name==$version" -d "$OUT/src/pip" 2>&1 | grep -o "https\?://[^ \"#]*/$file" | head -1 || true)
    [ -n "$link" ] || die "pip found no sdist $file for $name $version in its index"
    echo "$link"
}

# `fresh COMPONENT SHA256`: the component exists and was built from the archive of that hash.
fresh() { [ -s "$OUT/$1" ] && [ "$(cat "$OUT/$1.stamp" 2>/dev/null)" = "$2" ]; }

if fresh wstd_http_server.wasm "$WSTD_SHA256"; then
    step "wstd_http_server.wasm is built from $WSTD"
else
    crate_source wstd "$WSTD_VERSION" "$WSTD_SHA256" "$WSTD"
    # An empty [workspace] keeps the crate its own workspace, not a stray member of ours.
    printf '\n[workspace]\n' >>"$OUT/src/$WSTD/Cargo.toml"
    step "building $WSTD's http_server example for wasm32-wasip2"
    # The crate asks for "stable"; ours (rust-toolchain.toml) is a stable release that
    # setup.sh installs with the wasm32-wasip2 target. Its own lock file keeps the example's
    # dependencies as published.
    toolchain=$(sed -n 's/^channel = "\(.*\)"/\1/p' "$ROOT/rust-toolchain.toml")
    (cd "$OUT/src/$WSTD" && RUSTUP_TOOLCHAIN="$toolchain" CARGO_TARGET_DIR="$OUT/target" \
        cargo build --quiet --locked \
        --release --target wasm32-wasip2 --example http_server) ||
        die "cargo build of $WSTD's http_server example failed"
    cp "$OUT/target/wasm32-wasip2/release/examples/http_server.wasm" "$OUT/wstd_http_server.wasm"
    echo "$WSTD_SHA256" >"$OUT/wstd_http_server.wasm.stamp"
fi

if fresh cpy_http_echo.wasm "$CPY_SHA256"; then
    step "cpy_http_echo.wasm is built from $CPY"
else
    archive="$OUT/src/$CPY.tar.gz"
    link=""
    if ! echo "$CPY_SHA256  $archive" | sha256sum --check --status 2>/dev/null; then
        step "finding $CPY.tar.gz with pip"
        link=$(sdist_link componentize-py "$CPY_VERSION" "$CPY.tar.gz")
    fi
    unpack "$link" "$CPY_SHA256" "$archive" "$CPY"
    step "componentizing $CPY's examples/http/app.py"
    # As its README builds it: the sdist's own wit/ holds the wasi:http world it targets.
    (cd "$OUT/src/$CPY/examples/http" && "$COMPONENTIZE_PY" -d ../../wit \
        -w wasi:http/proxy@0.2.0 componentize app -o "$OUT/cpy_http_echo.wasm" >/dev/null) ||
        die "componentize-py of $CPY's examples/http failed"
    echo "$CPY_SHA256" >"$OUT/cpy_http_echo.wasm.stamp"
fi

# The JavaScript handler is ours (componentize-js publishes no example to build); its
# toolchain is the published one, pinned. StarlingMonkey exports wasi:http 0.2.10's handler:
# the world is jco's WIT of 0.2.12 (in the same install) with the http package at 0.2.10.
CJS=@bytecodealliance/componentize-js@0.23.0
JS_SOURCE="$ROOT/skills/js_echo/echo.js"
js_stamp="$CJS $(sha256sum "$JS_SOURCE" | cut -d' ' -f1)"
if fresh js_http_echo.wasm "$js_stamp"; then
    step "js_http_echo.wasm is built from skills/js_echo/echo.js with $CJS"
else
    need npm "apt-get install npm"
    mkdir -p "$OUT/js"
    [ -f "$OUT/js/package.json" ] || echo '{"private": true}' >"$OUT/js/package.json"
    step "installing $CJS with npm"
    (cd "$OUT/js" && npm install --no-audit --no-fund --save-exact "$CJS" >/dev/null) ||
        die "npm install $CJS failed"
    wit=$OUT/js/node_modules/@bytecodealliance/jco/lib/wit/builtin/0.2.12
    rm -rf "$OUT/js/wit" && mkdir -p "$OUT/js/wit/deps"
    sed 's/^package wasi:http@0.2.12;/package wasi:http@0.2.10;/' "$wit/wasi-http/package.wit" \
        >"$OUT/js/wit/package.wit"
    for package in io clocks random cli filesystem sockets; do
        cp -r "$wit/wasi-$package" "$OUT/js/wit/deps/"
    done
    step "componentizing skills/js_echo/echo.js"
    "$OUT/js/node_modules/.bin/componentize-js" "$JS_SOURCE" --wit "$OUT/js/wit" \
        --world-name proxy -o "$OUT/js_http_echo.wasm" >/dev/null ||
        die "componentize-js of skills/js_echo/echo.js failed"
    echo "$js_stamp" >"$OUT/js_http_echo.wasm.stamp"
fi

ls -l "$OUT"/*.wasm
