#!/usr/bin/env bash
# Install Debian's Chromium for the end-to-end browser test (tests/e2e), once.
# Idempotent: does nothing when /usr/bin/chromium already exists. Never runs `playwright install`
# (that downloads a browser build; the test drives the distribution's package instead).
# Under CI=true a failed install is an error; elsewhere a warning (the e2e test then skips locally,
# and fails under CI).
set -uo pipefail

CHROMIUM=/usr/bin/chromium

if [ -x "$CHROMIUM" ]; then
  exit 0
fi

echo "browser: installing Debian's chromium for the e2e test"
if bash "$(dirname "$0")/apt_install.sh" --no-install-recommends chromium && [ -x "$CHROMIUM" ]; then
  exit 0
fi

echo "browser: could not install chromium (apt-get failed or no root); the e2e test needs $CHROMIUM" >&2
if [ "${CI:-}" = "true" ]; then
  exit 1
fi
exit 0
