#!/usr/bin/env bash
# Fuzzes every parser skillprof runs on other people's files (cargo-fuzz, libFuzzer): the
# cmds language, host profiles, the 2024 harness's run logs and run folders. Each target
# starts from a corpus of the repository's real files (build/fuzz/corpus/TARGET keeps what
# libFuzzer adds, so later runs go on from there) and prints the inputs it tried and the
# crashes it found; a crash's input is kept in build/fuzz/artifacts/TARGET and the script
# exits 1.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   SECONDS  per target (default 600, the benchmark; the suite replays seeds and regressions
#            through the same checks in profiler/tests/fuzz_inputs.rs instead)
#   TARGET   cmds, host_profile, harness_log, run_folder (default: all four)
# A crash's input, once fixed, goes into profiler/fuzz/regressions/TARGET/: every run replays
# those first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build"
PREFIX=fuzz
source "$ROOT/scripts/common.sh"
case "${1:-}" in -h|--help) header_help "$0"; exit 0 ;; esac

NIGHTLY=nightly-2026-07-20    # scripts/setup.sh installs it (the BPF build's)
CARGO_FUZZ=0.13.2
SECONDS_EACH="${1:-600}"
[[ "$SECONDS_EACH" =~ ^[1-9][0-9]*$ ]] || die "SECONDS must be a whole number of seconds, not '$SECONDS_EACH'"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(cmds host_profile harness_log run_folder)

rustup toolchain list | grep -q "^$NIGHTLY" \
    || die "the nightly $NIGHTLY is missing: run scripts/setup.sh (it installs it)"
need c++ "libFuzzer is C++ and builds with the fuzz targets (as root: apt-get install g++)"
if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ"; then
    step "cargo-fuzz $CARGO_FUZZ (about 1 minute)"
    cargo install "cargo-fuzz@$CARGO_FUZZ" --locked --force
fi

# The corpus: the repository's own files of each kind.
seed() {
    local target=$1 dir="$BUILD/fuzz/corpus/$1"
    mkdir -p "$dir"
    case "$target" in
        cmds) cp "$ROOT"/cmds/*.cmds "$dir/" ;;
        host_profile) cp "$ROOT"/profiler/profiles/*.toml "$dir/" ;;
        harness_log) cp "$ROOT"/profiler/tests/fixtures/pharia-logs/*_run.log \
            "$ROOT"/profiler/tests/fixtures/rerender/run/*_run.log "$dir/" ;;
        run_folder)
            # A real run folder, its files one after another, each after a `--- NAME` line.
            local run="$ROOT/profiler/tests/fixtures/rerender/run"
            for name in meta.json entries.jsonl samples.csv commands.csv; do
                printf -- '--- %s\n' "$name"
                cat "$run/$name"
            done >"$dir/rerender-run"
            { printf -- '--- 260101_000000.000_run.log\n'; cat "$run"/*_run.log; } >>"$dir/rerender-run"
            ;;
        *) die "no fuzz target '$target' (cmds, host_profile, harness_log, run_folder)" ;;
    esac
}

FUZZ=(cargo "+$NIGHTLY" fuzz)
# Overflow and other debug checks on (-a); no sanitizer: the parsers are safe Rust, and
# without one libFuzzer tries several times the inputs a second.
OPTIONS=(--fuzz-dir "$ROOT/profiler/fuzz" --target-dir "$BUILD/fuzz/target" -s none -a)
for target in "${TARGETS[@]}"; do seed "$target"; done
step "building the fuzz targets (the first build takes minutes)"
(cd "$ROOT/profiler/fuzz" && "${FUZZ[@]}" build "${OPTIONS[@]}") >"$BUILD/fuzz/build.log" 2>&1 \
    || die "the fuzz targets did not build: $(tail -20 "$BUILD/fuzz/build.log")"

# Every crash found so far, fixed since, is replayed first: a regression fails the script.
for target in "${TARGETS[@]}"; do
    regressions="$ROOT/profiler/fuzz/regressions/$target"
    [ -d "$regressions" ] || continue
    step "$target: replaying $(find "$regressions" -type f | wc -l) input(s) that once crashed it"
    (cd "$ROOT/profiler/fuzz" && "${FUZZ[@]}" run "${OPTIONS[@]}" "$target" "$regressions"/* \
        -- -runs=1) >"$BUILD/fuzz/$target.regressions.log" 2>&1 \
        || die "$target crashes again on an input of $regressions: $(grep -E "panicked|SUMMARY" \
            "$BUILD/fuzz/$target.regressions.log" | head -3)"
done

crashed=0
for target in "${TARGETS[@]}"; do
    step "$target for $SECONDS_EACH s"
    artifacts="$BUILD/fuzz/artifacts/$target"
    mkdir -p "$artifacts"
    log="$BUILD/fuzz/$target.log"
    began=$SECONDS
    if (cd "$ROOT/profiler/fuzz" && "${FUZZ[@]}" run "${OPTIONS[@]}" "$target" \
        "$BUILD/fuzz/corpus/$target" -- -max_total_time="$SECONDS_EACH" -timeout=10 \
        -print_final_stats=1 -artifact_prefix="$artifacts/") >"$log" 2>&1; then
        crashes=0
    else
        crashes=1
        crashed=1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    corpus=$(find "$BUILD/fuzz/corpus/$target" -type f | wc -l)
    # A crash ends the target early: the time is the time it ran.
    printf '%-13s %10s inputs in %s s, %s crash(es), corpus %s files\n' \
        "$target" "${runs:-?}" "$((SECONDS - began))" "$crashes" "$corpus"
    if [ "$crashes" -ne 0 ]; then
        grep -E "panicked|ERROR|SUMMARY|Test unit written" "$log" | head -8 >&2 || true
        echo "  the whole log: $log" >&2
    fi
done
[ "$crashed" -eq 0 ] || die "a target crashed: its input is in $BUILD/fuzz/artifacts/"
