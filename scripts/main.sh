#!/usr/bin/env bash
# README command 1: installs what is missing, builds, and profiles cmds/bench.cmds on
# skillhost. Arguments go to `skillprof run`, e.g. `scripts/main.sh -- --allocator pooling`.
# Needs root: the probes load BPF programs.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
"$ROOT/scripts/build.sh" run
cd "$ROOT"
exec target/release/skillprof run cmds/bench.cmds "$@"
