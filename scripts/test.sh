#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs every test. The probe tests
# load real BPF programs and fail (never skip) without root, so run it as root.
set -euo pipefail
SUITE_STARTED=$(date +%s.%N)
# The suite's budget on a fresh 2-core machine, set-up and build included (docs/building.md):
# over it, the table at the end says so loudly; CI's own limit is 90 minutes.
SUITE_BUDGET_MIN=45
if [ "$(id -u)" -ne 0 ]; then
    echo "scripts/test.sh: the tests load BPF probes and need root; run: sudo scripts/test.sh" >&2
    exit 1
fi
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
PREFIX=test
# Each part's wall time goes to build/suite/parts.tsv (the test binaries' through
# scripts/suite-part.sh), the tests' retries and waits for the machine to retries.tsv and
# waits.tsv, and scripts/suite_report.py prints them as a table at the end, however the suite
# ends.
SUITE="$BUILD/suite"
export SKILLPROF_SUITE_DIR="$SUITE"
rm -rf "$SUITE"
mkdir -p "$SUITE"
seconds_since() { awk "BEGIN { print $(date +%s.%N) - $1 }"; }
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$SUITE/parts.tsv"; } # NAME SECONDS STATUS
failed=()
# `part NAME COMMAND...`: runs a part of the suite, timed; a failed part does not stop the
# parts after it, and fails the suite at its end.
part() {
    local name=$1 started status=0
    shift
    started=$(date +%s.%N)
    "$@" || status=$?
    record "$name" "$(seconds_since "$started")" "$status"
    [ "$status" -eq 0 ] || failed+=("$name")
}
report() {
    python3 "$ROOT/scripts/suite_report.py" "$SUITE" "$SUITE_BUDGET_MIN" || true
}
trap report EXIT
# The report test renders report.html in headless Chromium (Debian's; its own download of a
# browser is refused on this network).
if ! command -v chromium >/dev/null 2>&1; then
    step "chromium (Debian's, for the report test)"
    apt_install chromium
fi
if ! command -v strace >/dev/null 2>&1; then
    step "strace (Debian's: the independent count of the host's process_madvise calls)"
    apt_install strace
fi
# The watch test has a real Prometheus server (Debian's) scrape skillprof watch. Installing
# the package would also start it as a service on every interface: a policy-rc.d that
# refuses service starts (exit 101) is in place for the install only, unless one was there.
if ! command -v prometheus >/dev/null 2>&1; then
    step "prometheus (Debian's server, for the watch test; its service is not started)"
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
        apt_install prometheus
        rm -f /usr/sbin/policy-rc.d
        trap - EXIT
    else
        apt_install prometheus
    fi
fi
# Go: `go tool pprof` reads the time profile's pprof files in the time and watch tests, as a
# user would, and hey is built with it.
if ! command -v go >/dev/null 2>&1; then
    step "go (Debian's golang-go: go tool pprof for the tests, and hey's build)"
    apt_install golang-go
fi
# The host benchmark (cargo bench -p skillhost) drives the host with hey.
if [ ! -x "$BUILD/bin/hey" ]; then
    step "hey (HTTP load generator for the host benchmark) in build/bin"
    GOBIN="$BUILD/bin" go install github.com/rakyll/hey@v0.1.4
fi
# The tests read skillprof's outputs with the tools users feed them to: the Prometheus
# project's own parsers (/metrics, export --format openmetrics) and DuckDB (typed events).
PROMETHEUS_CLIENT=0.26.0
DUCKDB=2.0.1
if ! "$BUILD/venv-tools/bin/pip" freeze 2>/dev/null | grep -qx "prometheus_client==$PROMETHEUS_CLIENT" \
    || ! "$BUILD/venv-tools/bin/pip" freeze | grep -qx "duckdb==$DUCKDB"; then
    step "prometheus_client $PROMETHEUS_CLIENT and duckdb $DUCKDB (the tests' readers) in build/venv-tools"
    rm -rf "$BUILD/venv-tools"
    python3 -m venv "$BUILD/venv-tools"
    "$BUILD/venv-tools/bin/pip" install --quiet "prometheus_client==$PROMETHEUS_CLIENT" "duckdb==$DUCKDB"
fi
# The units test boots docs/systemd's units under a real systemd: a Debian bookworm root with
# systemd, made by debootstrap from this machine's own apt mirror, run by systemd-nspawn.
if ! command -v debootstrap >/dev/null 2>&1 || ! command -v systemd-nspawn >/dev/null 2>&1; then
    step "debootstrap and systemd-container (Debian's, for the units' boot test)"
    apt_install debootstrap systemd-container
fi
UNITS_ROOT="$BUILD/units-root"
if [ ! -e "$UNITS_ROOT.stamp" ]; then
    # apt's own mirror: a deb822 source's URIs, else a one-line source's.
    MIRROR=$(awk '/^URIs:/ { print $2; exit }' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    [ -n "$MIRROR" ] || MIRROR=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /:\/\//) { print $i; exit } }' \
        /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
    [ -n "$MIRROR" ] || die "apt has no mirror configured (/etc/apt/sources.list*): debootstrap needs one"
    step "a Debian bookworm root with systemd in build/units-root (~50 s, from $MIRROR)"
    rm -rf "$UNITS_ROOT"
    debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus bookworm "$UNITS_ROOT" \
        "$MIRROR" >/dev/null || die "debootstrap of build/units-root from $MIRROR failed"
    touch "$UNITS_ROOT.stamp"
fi
record "set-up" "$(seconds_since "$SUITE_STARTED")" 0
part "build" "$ROOT/scripts/build.sh" all
cd "$ROOT"
if [ ${#failed[@]} -eq 0 ]; then
    # Each test binary is a part of its own, timed by its runner; what cargo spends outside
    # them (finding them, anything stale to build) is a part too. The doc-tests come after,
    # without the runner: rustdoc runs them in a process of its own making.
    started=$(date +%s.%N)
    status=0
    # The probe tests save what the kernel matrix compares with its guest's
    # (scripts/kernel-matrix.sh --host-from-suite), so that they run once on this kernel.
    rm -rf "$BUILD/kernel-matrix/host"
    SKILLPROF_MATRIX_OUT="$BUILD/kernel-matrix/host" \
        cargo test --release --workspace --no-fail-fast --lib --bins --tests \
        --config "target.x86_64-unknown-linux-gnu.runner = ['$ROOT/scripts/suite-part.sh']" \
        || status=$?
    binaries=$(awk -F'\t' '$4 != "" { sum += $2 } END { print sum + 0 }' "$SUITE/parts.tsv")
    # Failed here only when no binary did: cargo itself failed (a build error).
    outside=$status
    if awk -F'\t' '$4 != "" && $3 != 0 { failed = 1 } END { exit !failed }' "$SUITE/parts.tsv"; then
        outside=0
    fi
    record "cargo test outside the binaries" \
        "$(awk "BEGIN { print $(seconds_since "$started") - $binaries }")" "$outside"
    [ "$status" -eq 0 ] || failed+=("cargo test")
    part "doc-tests" cargo test --release --workspace --no-fail-fast --doc
    # README command 1 while another apt holds its locks (see the script).
    part "apt-lock test" "$ROOT/scripts/apt-lock-test.sh"
    # The probe tests again on this kernel and in a Debian 6.1 guest (fentry/fexit, kprobes),
    # and the two kernels compared; see docs/kernel-matrix.md.
    part "kernel matrix" "$ROOT/scripts/kernel-matrix.sh" --host-from-suite
fi
[ ${#failed[@]} -eq 0 ] || die "failed: ${failed[*]} (the table below says where; logs in build/suite/)"
