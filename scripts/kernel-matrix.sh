#!/usr/bin/env bash
# The kernel matrix: the probe test suite on this machine's kernel (no fentry/fexit, no
# kprobes: the fallbacks must attach) and again inside a Debian 6.1 guest (both work: the
# preferred mechanisms must attach), then the two kernels' results compared: the exact-count
# workload's syscalls and bytes equal, its faults within 0.5%, and the stop breakdowns side by
# side (in the guest, fexit exit_mmap against the rss_stat estimate this machine relies on).
# Called by scripts/test.sh after `cargo test`, whose run of the probe tests on this kernel
# saved the host half's results already (--host-from-suite); runs alone too (as root).
#
# It prepares the guest first, idempotently (a second run only checks):
#   - apt packages: qemu-system-x86 busybox-static kmod e2fsprogs file (python3-venv if
#     python3 cannot make a venv);
#   - Debian's 6.1 kernel (the package linux-image-amd64 depends on), downloaded with
#     apt-get and extracted to build/guest/linux-<release>/, its modules depmod'ed in place:
#     vng finds them next to the kernel image, so nothing is written to /lib/modules;
#   - virtme-ng $VIRTME_NG in build/guest/venv;
#   - a fresh 512 MiB ext4 scratch disk (build/guest/scratch.ext4) on every run: the guest
#     sees the host's files over 9p, without page cache, and the reclaim test needs a
#     block-backed filesystem.
# The guest boots once (qemu software emulation: KVM hangs on these machines) and runs the
# test binaries cargo built, from the shared filesystem. This machine holds the memory
# controller in cgroup v1; the guest mounts cgroup2 with it, so memory_cgroup checks
# --memory-max on v1 here and on v2 there.
#
# Usage: scripts/kernel-matrix.sh [--prepare-only] [--host-from-suite] [--stop-runs N]
#                                 [--update-docs]
#   --host-from-suite  this kernel's half is what scripts/test.sh's `cargo test` saved in
#                    build/kernel-matrix/host (it sets SKILLPROF_MATRIX_OUT there, and
#                    SKILLPROF_EXPECT_MECHANISMS unset means fallback): the probe tests are
#                    not run a second time here, only in the guest
#   --stop-runs N    run the stop test N times in the guest (default 1), to measure the
#                    spread of exit_mmap against the rss_stat estimate
#   --update-docs    write the generated section into docs/kernel-matrix.md
# Results: build/kernel-matrix/{host,guest}/ (every saved JSON and each test's log),
# build/kernel-matrix/summary.json and section.md. Any missing prerequisite, failed
# test or disagreement exits non-zero; nothing is ever skipped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
GUEST="$ROOT/build/guest"
OUT="$ROOT/build/kernel-matrix"
VIRTME_NG=1.42                  # virtme-ng: boots a kernel on a snapshot of the host's files
GUEST_MEMORY=2G                 # the stop test holds 1.25 GiB
GUEST_CPUS=2
GUEST_TIMEOUT=1500              # seconds; one guest run takes about 2 minutes
TESTS=(probes probes_mode probes_counts probes_reclaim probes_stop memory_cgroup)

PREFIX=kernel-matrix
source "$ROOT/scripts/common.sh"

prepare_only=0 update_docs=0 stop_runs=1 host_from_suite=0
while [ $# -gt 0 ]; do
    case "$1" in
        --prepare-only) prepare_only=1 ;;
        --host-from-suite) host_from_suite=1 ;;
        --update-docs) update_docs=1 ;;
        --stop-runs)
            [ $# -ge 2 ] && [[ "$2" =~ ^[1-9][0-9]*$ ]] || die "--stop-runs needs a count"
            stop_runs="$2"
            shift
            ;;
        *) die "unknown argument $1 (see the header of $0)" ;;
    esac
    shift
done
[ "$(id -u)" -eq 0 ] || die "needs root (BPF probes, apt-get, a VM): sudo $0"
[ "$(uname -m)" = x86_64 ] || die "the probes and the guest kernel are x86_64 only"

# ---- prepare -------------------------------------------------------------------------------

install_packages() {
    local missing=() package
    for package in qemu-system-x86 busybox-static kmod e2fsprogs file; do
        installed "$package" || missing+=("$package")
    done
    if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
        missing+=(python3-venv)
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        step "apt-get install ${missing[*]}"
        apt_install "${missing[@]}"
    fi
    local command
    for command in qemu-system-x86_64 busybox depmod modprobe mkfs.ext4 file dpkg-deb python3; do
        command -v "$command" >/dev/null || die "$command is missing after installing its package"
    done
}

# The linux-image-6.1.0-NN-amd64 package that Debian's linux-image-amd64 points at now.
guest_package() {
    apt-cache depends linux-image-amd64 2>/dev/null \
        | sed -n 's/^ *Depends: \(linux-image-6\.1\.[0-9]*-[0-9]*-amd64\)$/\1/p' | head -n1
}

# Sets KERNEL_DIR and KERNEL_RELEASE, downloading and extracting the kernel if needed.
prepare_kernel() {
    if [ -f "$GUEST/kernel-release" ]; then
        KERNEL_RELEASE="$(cat "$GUEST/kernel-release")"
        KERNEL_DIR="$GUEST/linux-$KERNEL_RELEASE"
        if [ -f "$KERNEL_DIR/boot/vmlinuz-$KERNEL_RELEASE" ] \
            && [ -f "$KERNEL_DIR/lib/modules/$KERNEL_RELEASE/modules.dep" ]; then
            return
        fi
    fi
    local package
    package="$(guest_package)"
    if [ -z "$package" ]; then
        apt_update
        package="$(guest_package)"
    fi
    [ -n "$package" ] || die "apt-cache depends linux-image-amd64 names no linux-image-6.1.*-amd64 \
package: this needs Debian bookworm's archive (the guest kernel is Debian's 6.1)"
    step "guest kernel: $package (apt-get download, about 70 MB)"
    local download="$GUEST/download"
    rm -rf "$download" && mkdir -p "$download"
    # apt's sandbox user cannot write here, so apt warns that it downloads unsandboxed.
    if ! (cd "$download" && apt-get download -q "$package"); then
        apt_update
        package="$(guest_package)"
        (cd "$download" && apt-get download -q "$package") || die "apt-get download $package failed"
    fi
    local deb
    deb="$(ls "$download"/"$package"_*.deb 2>/dev/null | head -n1)"
    [ -n "$deb" ] || die "apt-get download $package left no .deb in $download"
    local staging="$GUEST/staging"
    rm -rf "$staging"
    dpkg-deb -x "$deb" "$staging" || die "dpkg-deb -x $deb failed"
    KERNEL_RELEASE="$(ls "$staging/lib/modules")"
    [[ "$KERNEL_RELEASE" =~ ^6\.1\.[0-9]+-[0-9]+-amd64$ ]] \
        || die "$deb holds kernel release '$KERNEL_RELEASE', not a Debian 6.1 amd64 kernel"
    [ -f "$staging/boot/vmlinuz-$KERNEL_RELEASE" ] || die "$deb has no boot/vmlinuz-$KERNEL_RELEASE"
    # Debian's packages ship no modules.dep: the guest's modprobe needs it.
    depmod -b "$staging" "$KERNEL_RELEASE" || die "depmod for $KERNEL_RELEASE failed"
    KERNEL_DIR="$GUEST/linux-$KERNEL_RELEASE"
    rm -rf "$KERNEL_DIR"
    mv "$staging" "$KERNEL_DIR"
    echo "$KERNEL_RELEASE" >"$GUEST/kernel-release"
    rm -rf "$download"
}

prepare_virtme() {
    VNG="$GUEST/venv/bin/vng"
    if ! "$VNG" --version 2>/dev/null | grep -q "$VIRTME_NG"; then
        step "virtme-ng $VIRTME_NG in build/guest/venv"
        rm -rf "$GUEST/venv"
        python3 -m venv "$GUEST/venv" || die "python3 -m venv $GUEST/venv failed"
        "$GUEST/venv/bin/pip" install --quiet "virtme-ng==$VIRTME_NG" \
            || die "pip install virtme-ng==$VIRTME_NG failed"
    fi
    "$VNG" --version 2>/dev/null | grep -q "$VIRTME_NG" || die "$VNG is not virtme-ng $VIRTME_NG"
    PYTHON="$GUEST/venv/bin/python3"
}

step "preparing the guest (packages, Debian 6.1 kernel, virtme-ng) under build/guest"
mkdir -p "$GUEST"
install_packages
prepare_kernel
prepare_virtme
step "guest ready: kernel $KERNEL_RELEASE, $("$VNG" --version 2>&1 | head -n1)"
[ "$prepare_only" -eq 0 ] || exit 0

# ---- the test binaries ---------------------------------------------------------------------

cd "$ROOT"
step "locating the probe test binaries (cargo test --no-run; builds only what is stale)"
# --workspace, as scripts/test.sh's `cargo test`: the same features, so the same binaries.
artifacts="$(cargo test --release --workspace --no-run --message-format=json)" \
    || die "cargo test --no-run failed: run scripts/build.sh (or scripts/test.sh) first"
declare -A BIN
for test in "${TESTS[@]}"; do
    BIN[$test]="$(printf '%s\n' "$artifacts" | "$PYTHON" -c '
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    target = message.get("target", {})
    if (message.get("reason") == "compiler-artifact" and message.get("executable")
            and target.get("kind") == ["test"] and target.get("name") == sys.argv[1]
            and "/profiler/" in target.get("src_path", "")):
        print(message["executable"])
' "$test")"
    [ -x "${BIN[$test]}" ] || die "no test binary for profiler/tests/$test.rs"
done

# ---- this machine's kernel -----------------------------------------------------------------

rm -rf "$OUT/guest" "$OUT/summary.json" "$OUT/section.md"
mkdir -p "$OUT/guest"
failed=()
if [ "$host_from_suite" -eq 1 ]; then
    for saved in probes exact-counts stop reclaim; do
        [ -f "$OUT/host/$saved.json" ] || die "--host-from-suite: no $OUT/host/$saved.json: \
run the probe tests with SKILLPROF_MATRIX_OUT=$OUT/host first (scripts/test.sh does)"
    done
    step "host kernel $(uname -r): the probe suite's results from the suite's own run of it"
else
    rm -rf "$OUT/host"
    mkdir -p "$OUT/host"
    step "host kernel $(uname -r): the probe suite, expecting the fallbacks"
    for test in "${TESTS[@]}"; do
        started=$SECONDS
        rc=0
        (cd "$ROOT/profiler" && SKILLPROF_EXPECT_MECHANISMS=fallback SKILLPROF_MATRIX_OUT="$OUT/host" \
            "${BIN[$test]}" --nocapture >"$OUT/host/$test.log" 2>&1) || rc=$?
        step "  host  $test: $([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)") in $((SECONDS - started)) s"
        if [ $rc -ne 0 ]; then
            failed+=("host:$test")
            grep -E "panicked|assertion|^test .* FAILED|^---- " "$OUT/host/$test.log" | head -n 20 >&2 || true
        fi
    done
fi

# ---- the Debian 6.1 guest ------------------------------------------------------------------

step "guest scratch disk: fresh ext4 image build/guest/scratch.ext4"
rm -f "$GUEST/scratch.ext4"
truncate -s 512M "$GUEST/scratch.ext4"
mkfs.ext4 -q -F -L skillprof "$GUEST/scratch.ext4" || die "mkfs.ext4 on the scratch image failed"

# What runs inside the guest: plain sh, on the host's files; results go to $OUT/guest (shared
# read-write), one .rc file per test and a done marker, because vng's own exit code says
# nothing (255 even on success).
runner="$OUT/guest/run.sh"
{
    echo '#!/bin/sh'
    echo "# Generated by scripts/kernel-matrix.sh; runs inside the Debian $KERNEL_RELEASE guest."
    echo "OUT='$OUT/guest'"
    cat <<'EOF'
say() { echo "kernel-matrix guest: $*"; }
uname -r >"$OUT/kernel"
say "kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
# The scratch disk is virtio-blk; Debian builds its driver and ext4 as modules.
modprobe -a virtio_blk ext4
i=0
while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.2; i=$((i + 1)); done
mkdir -p /tmp/skillprof-scratch
if mount -t ext4 /dev/vda /tmp/skillprof-scratch; then
    echo 0 >"$OUT/scratch.rc"
else
    echo 1 >"$OUT/scratch.rc"
    say "FAILED to mount the scratch disk /dev/vda"
fi
export SKILLPROF_EXPECT_MECHANISMS=preferred SKILLPROF_MATRIX_OUT="$OUT"
export SKILLPROF_TEST_SCRATCH=/tmp/skillprof-scratch
# cgroup v2 with the memory controller, as most current distributions have it: the
# memory_cgroup test must find --memory-max's cgroup there.
if ! grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    mkdir -p /sys/fs/cgroup
    mount -t cgroup2 none /sys/fs/cgroup || say "FAILED to mount cgroup2 on /sys/fs/cgroup"
fi
say "cgroup2 controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
export SKILLPROF_EXPECT_CGROUP=v2
run() { # name binary [out]
    name=$1 bin=$2 out=${3:-$OUT}
    mkdir -p "$out"
    say "running $name"
    started=$(date +%s)
    # One test at a time: under software emulation, tests attaching BPF trampolines from
    # several processes at once starved RCU for minutes (soft lockups in the console).
    (cd "$ROOT/profiler" && SKILLPROF_MATRIX_OUT="$out" "$bin" --nocapture --test-threads=1 >"$out/$name.log" 2>&1)
    rc=$?
    echo "$rc $(($(date +%s) - started))" >"$out/$name.rc"
    say "$name: exit $rc in $(($(date +%s) - started)) s"
}
EOF
    echo "ROOT='$ROOT'"
    for test in "${TESTS[@]}"; do
        echo "run $test '${BIN[$test]}'"
    done
    for i in $(seq 2 "$stop_runs"); do
        echo "run probes_stop '${BIN[probes_stop]}' '$OUT/guest/stop-runs/$i'"
    done
    echo 'sync; say done; echo done >"$OUT/done"'
} >"$runner"

step "guest kernel $KERNEL_RELEASE: booting (qemu, software emulation) and running the suite there"
guest_started=$SECONDS
rc=0
PATH="$GUEST/venv/bin:$PATH" timeout -k 30 "$GUEST_TIMEOUT" "$VNG" -v --disable-kvm \
    -r "$KERNEL_DIR/boot/vmlinuz-$KERNEL_RELEASE" --memory "$GUEST_MEMORY" --cpus "$GUEST_CPUS" \
    --disk "$GUEST/scratch.ext4" --rwdir "$OUT/guest" \
    -- "sh $runner" </dev/null >"$OUT/guest/console.log" 2>&1 || rc=$?
guest_seconds=$((SECONDS - guest_started))
echo "$guest_seconds" >"$OUT/guest/wall-seconds"
grep "^kernel-matrix guest:" "$OUT/guest/console.log" | sed 's/^/  /' || true
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    die "the guest did not finish within $GUEST_TIMEOUT s; see $OUT/guest/console.log"
fi
if [ ! -f "$OUT/guest/done" ]; then
    tail -n 40 "$OUT/guest/console.log" >&2
    die "the guest never reached its end marker (vng exit $rc): it did not boot or crashed; \
see $OUT/guest/console.log"
fi
[ "$(cat "$OUT/guest/scratch.rc")" = 0 ] || failed+=("guest:scratch-disk")
check_guest_test() { # name dir
    local rc_file="$2/$1.rc" rc
    rc="$(cut -d' ' -f1 "$rc_file" 2>/dev/null || echo missing)"
    step "  guest $1: $([ "$rc" = 0 ] && echo ok || echo "FAILED (exit $rc)") in $(cut -d' ' -f2 "$rc_file" 2>/dev/null || echo ?) s"
    if [ "$rc" != 0 ]; then
        failed+=("guest:$1${3:-}")
        grep -E "panicked|assertion|^test .* FAILED|^---- " "$2/$1.log" 2>/dev/null | head -n 20 >&2 || true
    fi
}
for test in "${TESTS[@]}"; do
    check_guest_test "$test" "$OUT/guest"
done
for i in $(seq 2 "$stop_runs"); do
    check_guest_test probes_stop "$OUT/guest/stop-runs/$i" " (run $i)"
done
step "guest part: $guest_seconds s wall (boot included)"

# ---- compare and report --------------------------------------------------------------------

if [ ${#failed[@]} -gt 0 ]; then
    die "probe tests failed: ${failed[*]} (logs in $OUT/host and $OUT/guest)"
fi
step "comparing the two kernels"
report_args=("$OUT")
[ "$update_docs" -eq 0 ] || report_args+=(--update-docs "$ROOT/docs/kernel-matrix.md")
"$PYTHON" "$ROOT/scripts/kernel_matrix_report.py" "${report_args[@]}" \
    || die "the kernels disagree (see above and $OUT/summary.json)"
step "passed: both kernels ran the probe suite and agree ($OUT/section.md)"
