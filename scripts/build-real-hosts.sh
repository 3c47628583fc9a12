#!/usr/bin/env bash
# Builds the two real Pharia hosts skillprof has profiles for, from their public source, into
# build/real-hosts/: the benchmarks that check skillprof's profiles and skillhost's emulations
# against them run these binaries (cargo bench --bench real_hosts).
#
#   pharia-kernel-2024        the Pharia Kernel of October 2024 (commit 21fd8a5b, wasmtime 26),
#                             with the Rust of its time (1.82.0), release build
#   pharia-kernel-2024-debug  the same, debug build: the 2024 study's logs were made with one
#   pharia-engine-0.15        the Pharia Engine 0.15.0 (commit 329c933e, November 2025,
#                             wasmtime 33), with Rust 1.95.0, release build
#
# Usage: scripts/build-real-hosts.sh --source DIR [--only 2024|2024-debug|2025]...
#   --source DIR   a git clone of github.com/Aleph-Alpha/pharia-engine (a bare mirror works);
#                  the commits above are exported from it, so its checkout is never touched
#   --only NAME    build only that one (repeatable); default: all three
# Each build takes 10-20 minutes on 2 cores, and they run one after the other. A binary whose
# stamp names the same commit and toolchain is kept: a second run only checks.
#
# Both trees include a tokenizer file (src/tokenizers/pharia-1-llm-7b-control_tokenizer.json)
# that the public repository's history does not hold (its blob is missing); only tests and
# the token-counting tool use it, so a file holding `{}` stands in for it, and the script
# says so.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="$ROOT/build/real-hosts"
PREFIX=real-hosts
source "$ROOT/scripts/common.sh"

# name commit toolchain profile binary
HOSTS=(
    "2024 21fd8a5bd572c6ad95095d878b22a7b665dd1775 1.82.0 release pharia-kernel"
    "2024-debug 21fd8a5bd572c6ad95095d878b22a7b665dd1775 1.82.0 debug pharia-kernel"
    "2025 329c933e03cc9d2a3f424844a957c8f0c5de24af 1.95.0 release pharia-engine"
)
TOKENIZER=src/tokenizers/pharia-1-llm-7b-control_tokenizer.json

source_dir="" only=()
while [ $# -gt 0 ]; do
    case "$1" in
        --source)
            [ $# -ge 2 ] || die "--source needs a directory"
            source_dir="$2"
            shift
            ;;
        --only)
            [ $# -ge 2 ] || die "--only needs 2024, 2024-debug or 2025"
            case "$2" in 2024 | 2024-debug | 2025) only+=("$2") ;; *) die "--only $2: expected 2024, 2024-debug or 2025" ;; esac
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
[ -n "$source_dir" ] || die "no source tree: give --source DIR, a git clone of \
https://github.com/Aleph-Alpha/pharia-engine (skillprof builds the real hosts from their public \
source, and does not download it for you)"
git -C "$source_dir" rev-parse --git-dir >/dev/null 2>&1 \
    || die "--source $source_dir is not a git repository"
need rustup "the hosts are built with the Rust of their time, through rustup"
need cc "the hosts link with a C compiler (apt-get install gcc)"

name_of() { # name -> the binary's file name under build/real-hosts
    case "$1" in
        2024) echo pharia-kernel-2024 ;;
        2024-debug) echo pharia-kernel-2024-debug ;;
        2025) echo pharia-engine-0.15 ;;
    esac
}

build_one() { # name commit toolchain profile binary
    local name=$1 commit=$2 toolchain=$3 profile=$4 binary=$5
    local file stamp tree target
    file="$OUT/$(name_of "$name")"
    stamp="$commit $toolchain $profile"
    if [ -x "$file" ] && [ "$(cat "$file.stamp" 2>/dev/null)" = "$stamp" ]; then
        step "$(name_of "$name"): up to date ($stamp)"
        return
    fi
    git -C "$source_dir" cat-file -e "$commit^{commit}" 2>/dev/null \
        || die "$source_dir does not hold commit $commit: fetch it (git -C $source_dir fetch origin)"
    step "rust $toolchain"
    rustup toolchain install "$toolchain" --profile minimal >/dev/null 2>&1 \
        || rustup toolchain install "$toolchain" --profile minimal
    tree="$OUT/src-${commit:0:8}"
    if [ ! -f "$tree/.exported" ]; then
        step "exporting ${commit:0:8} from $source_dir to $tree"
        rm -rf "$tree" && mkdir -p "$tree"
        # The tokenizer's blob is missing from the public history: every other file is exported.
        git -C "$source_dir" archive "$commit" -- . ":(exclude)$TOKENIZER" | tar -x -C "$tree"
        if git -C "$source_dir" cat-file -e "$commit:$TOKENIZER" 2>/dev/null; then
            git -C "$source_dir" show "$commit:$TOKENIZER" >"$tree/$TOKENIZER"
        else
            step "  $TOKENIZER is not in the public history: a file holding {} stands in"
            mkdir -p "$(dirname "$tree/$TOKENIZER")"
            echo '{}' >"$tree/$TOKENIZER"
        fi
        touch "$tree/.exported"
    fi
    target="$OUT/target-${commit:0:8}"
    local flags=()
    [ "$profile" = release ] && flags+=(--release)
    step "$(name_of "$name"): cargo +$toolchain build ${flags[*]} --bin $binary (10-20 minutes on 2 cores)"
    local started=$SECONDS
    (cd "$tree" && CARGO_TARGET_DIR="$target" cargo "+$toolchain" build "${flags[@]}" --locked --bin "$binary") \
        || die "building $binary at ${commit:0:8} failed (see above)"
    cp "$target/$profile/$binary" "$file.partial"
    mv "$file.partial" "$file"
    echo "$stamp" >"$file.stamp"
    step "$(name_of "$name"): built in $((SECONDS - started)) s: $file"
}

mkdir -p "$OUT"
for host in "${HOSTS[@]}"; do
    read -r name commit toolchain profile binary <<<"$host"
    if [ ${#only[@]} -eq 0 ] || printf '%s\n' "${only[@]}" | grep -qx "$name"; then
        build_one "$name" "$commit" "$toolchain" "$profile" "$binary"
    fi
done
