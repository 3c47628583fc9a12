# Sourced by the set-up scripts: messages, prerequisite checks and apt steps that wait for
# another apt instead of failing. Set PREFIX before sourcing ("setup", "kernel-matrix").

# Colour only on a terminal: CI logs and pipes get plain text.
if [ -t 1 ] && [ -t 2 ]; then
    BOLD=$'\033[1m' RED=$'\033[1;31m' PLAIN=$'\033[0m'
else
    BOLD='' RED='' PLAIN=''
fi

step() { printf '%s%s:%s %s\n' "$BOLD" "$PREFIX" "$PLAIN" "$*"; }
die() {
    printf '%s%s: FAILED:%s %s\n' "$RED" "$PREFIX" "$PLAIN" "$*" >&2
    exit 1
}

# `header_help SCRIPT`: SCRIPT's --help, its header comment down to `set -euo`.
header_help() { sed -n '2,/^set -euo/p' "$1" | sed '$d; s/^# \{0,1\}//'; }

# `need COMMAND HOW`: stops with HOW (how to get it) when COMMAND is missing.
need() { command -v "$1" >/dev/null 2>&1 || die "$1 is missing: $2"; }

# `installed PACKAGE`: true only when dpkg has PACKAGE wholly installed. `dpkg -s` also
# succeeds for a package it merely knows of, and piping it into `grep -q` can fail under
# pipefail: grep stops reading at the Status line and dpkg dies of SIGPIPE on its next write.
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

# On a fresh machine unattended-upgrades often holds apt's locks for minutes. apt-get install
# waits for the dpkg locks by itself with DPkg::Lock::Timeout; apt-get update does not wait
# for the lists lock, so it is retried while that lock is what stops it.
APT_LOCK_WAIT_S=600
apt_update() {
    local waited=0 error
    step "apt-get update"
    until error=$(apt-get update -qq 2>&1 >/dev/null); do
        grep -q "Could not get lock" <<<"$error" || die "apt-get update failed: $error"
        [ "$waited" -lt "$APT_LOCK_WAIT_S" ] || die "apt's lists lock still held after ${waited} s: $error"
        [ "$waited" -gt 0 ] || step "another apt holds its lists lock; waiting for it"
        sleep 5
        waited=$((waited + 5))
    done
}

# `apt_install PACKAGE...`: installs, refreshing the package lists once if a package is not
# found in them.
apt_install() {
    local install=(apt-get -o "DPkg::Lock::Timeout=$APT_LOCK_WAIT_S" install -y -qq
        --no-install-recommends "$@")
    DEBIAN_FRONTEND=noninteractive "${install[@]}" >/dev/null 2>&1 && return
    apt_update
    DEBIAN_FRONTEND=noninteractive "${install[@]}" >/dev/null || die "apt-get install $* failed"
}
