#!/usr/bin/env bash
# deploy/install-deps.sh [build|test|bench] - install the Debian 12 packages pagestream needs.
# Idempotent: installs only what is missing and prints it. Without root, prints the
# exact apt-get line and exits non-zero.
set -eu
what=${1:-build}

BUILD_PKGS="gcc make pkg-config liburing-dev libcurl4-openssl-dev libjpeg62-turbo-dev libnfs-dev
  python3 python3-numpy python3-pil"
TEST_PKGS="clang libclang-rt-14-dev valgrind shellcheck fio nginx libnginx-mod-http-echo
  swift-proxy swift-object swift-container swift-account memcached
  nfs-ganesha nfs-ganesha-vfs libnfs-utils rpcbind python3-boto3 python3-yaml python3-torch
  libdlpack-dev util-linux e2fsprogs curl openssl"
BENCH_PKGS="gnuplot-nox python3-torchvision"

case $what in
    build) pkgs=$BUILD_PKGS ;;
    test) pkgs="$BUILD_PKGS $TEST_PKGS" ;;
    bench) pkgs="$BUILD_PKGS $TEST_PKGS $BENCH_PKGS" ;;
    *) echo "usage: $0 [build|test|bench]" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ]; then
    exit 0
fi
echo "pagestream: installing Debian packages:$missing"
if [ "$(id -u)" != 0 ]; then
    echo "pagestream: not root; run:  sudo apt-get install -y --no-install-recommends$missing" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# refresh the lists once if they are missing or older than a day
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null | head -n 1)" ]; then
    apt-get update -q >/dev/null
fi
# shellcheck disable=SC2086
apt-get install -y -q --no-install-recommends $missing >/tmp/pagestream-apt.log 2>&1 || {
    echo "pagestream: apt-get install failed; last lines of /tmp/pagestream-apt.log:" >&2
    tail -n 20 /tmp/pagestream-apt.log >&2
    exit 1
}
echo "pagestream: installed:$missing"
