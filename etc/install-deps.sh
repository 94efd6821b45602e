#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian packages named on the command line that are missing.
# As root it runs apt-get; otherwise it prints the command and fails.
missing=""
for p in "$@"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "vramd needs:$missing" >&2
	echo "run: sudo apt-get install -y$missing" >&2
	exit 1
fi
echo "installing:$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq$missing >/dev/null || {
	echo "apt-get install$missing failed" >&2
	exit 1
}
