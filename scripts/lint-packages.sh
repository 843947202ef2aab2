#!/usr/bin/env bash
# Lints the built packages the way distributions do: `scripts/lint-packages.sh DEB RPM`.
# lintian must report no error and no warning (the one deliberate deviation is
# overridden in packaging/debian/lintian-overrides); rpmlint no error (errors the
# package cannot fix are filtered in packaging/rpm/rpmlint.toml, and its warnings
# are explained in docs/operations.md). Both print what they found.
set -euo pipefail
cd "$(dirname "$0")/.."
deb=$1 rpm=$2
echo "lintian $(lintian --version | awk '{print $2}'): $deb"
lintian --fail-on error,warning --info "$deb"
echo "rpmlint $(rpmlint --version 2>/dev/null | head -n 1): $rpm"
rpmlint --config packaging/rpm/rpmlint.toml "$rpm"
