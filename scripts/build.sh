#!/usr/bin/env bash
# Builds what a run or a test needs, after scripts/setup.sh: the BPF object (which the
# skillprof binary embeds), the sample skill components, and the release binaries.
#   scripts/build.sh        everything, tests and benchmarks too (scripts/test.sh)
#   scripts/build.sh run    only the skillprof and skillhost binaries (scripts/main.sh), so a
#                           run does not wait for test and benchmark builds it never uses
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "${1:-all}" in
    all) targets=(--workspace --all-targets) ;;
    run) targets=(-p skillprof -p skillhost --bins) ;;
    *)
        echo "usage: scripts/build.sh [all|run]" >&2
        exit 2
        ;;
esac

cargo xtask build-ebpf
cargo xtask build-skills
cargo build --release "${targets[@]}"
