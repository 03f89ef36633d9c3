#!/bin/sh
# Build the container hosts' image, p2p-testbed/debian:bookworm, from Debian's
# packages (debootstrap, minbase, plus python3, iproute2, ping and procps) and
# import it into Docker. Nothing comes from a registry. Does nothing when the
# image exists; starts dockerd when it is installed but not running.
#
#   scripts/build-image.sh [IMAGE]
set -eu

image=${1:-p2p-testbed/debian:bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ "$(id -u)" -ne 0 ]; then
    echo "build-image: must run as root" >&2
    exit 1
fi

if ! docker info >/dev/null 2>&1; then
    echo "build-image: starting dockerd (log: /var/log/p2p-testbed-dockerd.log)"
    setsid dockerd >>/var/log/p2p-testbed-dockerd.log 2>&1 < /dev/null &
    tries=0
    until docker info >/dev/null 2>&1; do
        tries=$((tries + 1))
        if [ "$tries" -gt 60 ]; then
            echo "build-image: dockerd did not start; see /var/log/p2p-testbed-dockerd.log" >&2
            exit 1
        fi
        sleep 0.5
    done
fi

if docker image inspect "$image" >/dev/null 2>&1; then
    exit 0
fi

root=$(mktemp -d /tmp/p2p-testbed-rootfs.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "build-image: debootstrap bookworm into $root (about a minute)"
debootstrap --variant=minbase --include=python3,iproute2,iputils-ping,procps \
    bookworm "$root" "$mirror" >"$root.log" 2>&1 || {
    echo "build-image: debootstrap failed; the last lines of its log:" >&2
    tail -20 "$root.log" >&2
    rm -f "$root.log"
    exit 1
}
rm -f "$root.log"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import -c 'CMD ["/bin/sh"]' - "$image" >/dev/null
echo "build-image: $image built"
