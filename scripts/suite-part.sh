#!/usr/bin/env bash
# cargo's runner for the suite's test binaries (scripts/test.sh sets it with --config): runs
# one binary as cargo would, with libtest's own timing of each test (`--report-time`), keeps
# its output in $SKILLPROF_SUITE_DIR/tests/ and adds its wall time and exit status to
# parts.tsv there, from which scripts/suite_report.py makes the suite's table.
#
# `--report-time` is one of libtest's unstable options: a stable-built test binary accepts
# them when RUSTC_BOOTSTRAP is set in its own environment (libtest reads it at run time), so
# it is set here, for the test binary alone, and never for a compiler.
set -uo pipefail
: "${SKILLPROF_SUITE_DIR:?is unset: this is the test runner scripts/test.sh gives cargo, which sets it}"
SUITE=$SKILLPROF_SUITE_DIR

binary=$1
shift
# cargo names the package in the binary's environment: target/release/deps/run-0123abcd of
# the package skillprof is "skillprof run"; rustdoc's binary of a crate's doc-tests, rust_out.
name=$(basename "$binary" | sed 's/-[0-9a-f]\{16\}$//; s/^rust_out$/doc-tests/')
part="${CARGO_PKG_NAME:-$(basename "$PWD")} $name"
log="$SUITE/tests/$(basename "$binary").log"
mkdir -p "$SUITE/tests"
started=$(date +%s.%N)
RUSTC_BOOTSTRAP=1 "$binary" "$@" -Z unstable-options --report-time 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
printf '%s\t%s\t%s\t%s\n' "$part" "$(awk "BEGIN { print $(date +%s.%N) - $started }")" "$status" "$log" \
    >>"$SUITE/parts.tsv"
exit "$status"
