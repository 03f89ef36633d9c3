#!/bin/sh
# Install the Debian/Ubuntu packages the testbed needs, and only those that are
# missing. Safe to run again: it does nothing when everything is present.
#
#   mininet      hosts, mnexec and the interactive CLI (`testbed up`)
#   iproute2     `ip`: the emulator builds links, addresses and routes with `ip -batch`
#   iptables     the NFQUEUE rule that hands forwarded packets to the delay engine
#   iputils-ping `h1 ping h2` in the Mininet CLI
#   util-linux   nsenter, to start processes inside a host's namespace
#   python3-venv the project's virtual environment (.venv)
#   docker.io    container hosts (dockerd is started by the testbed when needed)
#   debootstrap  builds the container hosts' Debian image (scripts/build-image.sh)
#   chromium     the tests render run reports (report.html) in it, headless
#   gcc, libc6-dev  build the delay engine's compiled data path and the prober (make native)
#   nftables     `nft`: the core's rules that duplicate packets and set ECN CE marks
#   iperf3       `testbed bench throughput`'s TCP flows
#   openssh-server  the suite's second "machine" runs sshd for `testbed cluster up user@host`
set -eu

if [ "$(id -u)" -ne 0 ]; then
    echo "install-system-deps: must run as root (network namespaces need it)" >&2
    exit 1
fi

missing=""
need() {  # need <package> <test command...>
    pkg=$1; shift
    if ! "$@" >/dev/null 2>&1; then
        missing="$missing $pkg"
    fi
}
need mininet      sh -c 'command -v mnexec && /usr/bin/python3 -c "import mininet.net"'
need iproute2     sh -c 'command -v ip'
need iptables     sh -c 'command -v iptables'
need iputils-ping sh -c 'command -v ping'
need util-linux   sh -c 'command -v nsenter'
need procps       sh -c 'command -v ps'
need python3-venv /usr/bin/python3 -c 'import ensurepip, venv'
need docker.io    sh -c 'command -v dockerd'
need debootstrap  sh -c 'command -v debootstrap'
need chromium     sh -c 'command -v chromium'
need gcc          sh -c 'command -v gcc'
need libc6-dev    sh -c 'test -f /usr/include/stdio.h'
need linux-libc-dev sh -c 'test -f /usr/include/linux/netlink.h'
need nftables     sh -c 'command -v nft'
need iperf3       sh -c 'command -v iperf3'
need openssh-server sh -c 'test -x /usr/sbin/sshd'

if [ -z "$missing" ]; then
    exit 0
fi

echo "install-system-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
# A fresh container often has no package lists yet.
apt-get update -qq
# --no-install-recommends: Mininet recommends Open vSwitch, which the testbed
# does not use (hosts hang off a routing core, not a switch).
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing >/dev/null
