#!/usr/bin/env bash
# System packages rftbus needs beyond Python and the JDK, from Debian's archive (run by `make install`):
#   bubblewrap                the code-execution sandbox (rftbus/ground/rewards/sandbox.py)
#   chromium, chromium-driver  the studio's browser tests (tests/system/test_studio_browser.py, headless)
# Installs what is missing when it may (root, or passwordless sudo) and apt-get exists; otherwise says
# what to install and goes on (only the code reward and the browser tests need them; each says so).
set -euo pipefail
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "note: install ${missing[*]} with your package manager (the code-execution sandbox and the browser tests need them)" >&2
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then sudo=(); elif sudo -n true 2>/dev/null; then sudo=(sudo -n); else
  echo "note: run 'sudo apt-get install ${missing[*]}' (the code-execution sandbox and the browser tests need them)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
# quiet unless it fails (debconf's notices go to stderr)
if ! out=$("${sudo[@]}" apt-get update -qq 2>&1 && \
           "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" 2>&1); then
  echo "$out" >&2
  echo "error: could not install ${missing[*]} (needed by the code-execution sandbox and the browser tests)" >&2
  exit 1
fi
