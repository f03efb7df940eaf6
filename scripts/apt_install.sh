#!/usr/bin/env bash
# Install Debian packages, one apt at a time: scripts/apt_install.sh [apt-get install options] PACKAGE...
#
# CI installs two things at once on a fresh machine: `make test` installs chromium (scripts/browser.sh) while
# the background track's `make drill` installs iptables, and a second apt-get fails at once on the dpkg lock
# ("Could not get lock /var/lib/dpkg/lock-frontend ... held by process (apt-get)"). So every install of ours
# takes one file lock first (flock waits for the other to finish), and apt-get itself waits up to five
# minutes for the dpkg lock when something else holds it (DPkg::Lock::Timeout, apt 1.9.11 and later).
# Needs root, or sudo; exits non-zero when apt-get fails.
set -euo pipefail

if [ "$#" -eq 0 ]; then
  echo "usage: scripts/apt_install.sh [apt-get install options] PACKAGE..." >&2
  exit 2
fi
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "apt_install: installing $* needs root or sudo" >&2
  exit 1
fi
apt=("${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -qq)
lock="${TMPDIR:-/tmp}/factgate-apt.lock"
(
  flock -w 600 9 || { echo "apt_install: waited 10 minutes for $lock" >&2; exit 1; }
  "${apt[@]}" update
  "${apt[@]}" install -y "$@"
) 9>>"$lock"
