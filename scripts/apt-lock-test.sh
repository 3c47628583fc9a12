#!/usr/bin/env bash
# A test of README command 1 on a machine where another apt holds its locks, as
# unattended-upgrades often does on a fresh one: scripts/main.sh must wait for apt and succeed,
# not fail at once. libc6-dbg is removed first, so that main.sh really has to install
# something; a second process holds dpkg's and apt's locks for $HOLD_S s the way apt does
# (fcntl write locks on lock-frontend, lock and lists/lock). Run by scripts/test.sh, as root.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PREFIX=apt-lock-test
source "$ROOT/scripts/common.sh"
HOLD_S=30

[ "$(id -u)" -eq 0 ] || die "it removes and installs a package and takes apt's locks: run it as root"
work=$(mktemp -d)
holder=
finish() {
    [ -z "$holder" ] || kill "$holder" 2>/dev/null || true
    # The machine keeps its libc symbols whatever happened above.
    installed libc6-dbg || apt_install libc6-dbg
    rm -rf "$work"
}
trap finish EXIT

step "removing libc6-dbg, which main.sh installs"
DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 remove -y -qq libc6-dbg >/dev/null

python3 - "$HOLD_S" >"$work/holder" <<'PY' &
import fcntl, os, sys, time
locks = ["/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock"]
fds = [os.open(path, os.O_RDWR | os.O_CREAT, 0o640) for path in locks]
for fd in fds:
    fcntl.lockf(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[1]))
print(f"released {time.time():.0f}", flush=True)
PY
holder=$!
for _ in $(seq 100); do
    grep -q held "$work/holder" && break
    sleep 0.1
done
grep -q held "$work/holder" || die "could not take apt's locks"
step "apt's locks held for $HOLD_S s; running scripts/main.sh"
"$ROOT/scripts/main.sh" --out "$work/runs" >"$work/main.log" 2>&1 \
    || die "scripts/main.sh failed while another process held apt's locks:
$(tail -30 "$work/main.log")"
wait "$holder"
holder=

released=$(sed -n 's/^released //p' "$work/holder")
installed libc6-dbg \
    || die "main.sh succeeded but did not install libc6-dbg"
installed_at=$(grep " install libc6-dbg" /var/log/dpkg.log | tail -1 | cut -d' ' -f1,2)
installed=$(date -d "$installed_at" +%s)
[ "$installed" -ge "$released" ] \
    || die "libc6-dbg was installed at $installed_at, before apt's locks were released"
ls "$work"/runs/*/commands.csv >/dev/null 2>&1 || die "main.sh left no run: $(tail -30 "$work/main.log")"
step "passed: main.sh waited for apt's locks, installed libc6-dbg $((installed - released + HOLD_S)) s after they were taken, and profiled cmds/bench.cmds"
