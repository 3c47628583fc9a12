#!/usr/bin/env bash
# Builds everything a run or a test needs, after scripts/setup.sh: the BPF object (which
# the skillprof binary embeds), the sample skill components, and the release binaries.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo xtask build-ebpf
cargo xtask build-skills
cargo build --release --workspace --all-targets
