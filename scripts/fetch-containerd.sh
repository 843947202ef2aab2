#!/usr/bin/env bash
# The containerd binaries the real-world corpus test (tests/real_world.rs) checks
# configs with besides the installed one: Debian's containerd 1.7 (trixie) and
# 2.x (sid), unpacked from their .deb into the cache. Nothing is installed: apt
# works on private lists under the cache, the host's apt state is not touched.
set -euo pipefail
cache="${RDMA_AGENT_CONTAINERD_CACHE:-/var/cache/rdma-node-agent/containerd}"
want=(trixie sid)
missing=0
for s in "${want[@]}"; do [ -x "$cache/$s/containerd" ] || missing=1; done
if [ "$missing" = 0 ]; then
    exit 0
fi
apt_dir="$cache/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
printf 'deb http://deb.debian.org/debian %s main\n' "${want[@]}" >"$apt_dir/sources.list"
opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-"
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o "APT::Sandbox::User=root")
apt-get "${opts[@]}" update -qq
for s in "${want[@]}"; do
    (cd "$apt_dir" && rm -f containerd_*.deb && apt-get "${opts[@]}" download -qq "containerd/$s")
    x=$(mktemp -d)
    dpkg-deb -x "$apt_dir"/containerd_*.deb "$x"
    mkdir -p "$cache/$s"
    cp "$x/usr/bin/containerd" "$cache/$s/containerd"
    rm -rf "$x"
    "$cache/$s/containerd" --version
done
# By major.minor, as the test looks them up.
for s in "${want[@]}"; do
    v=$("$cache/$s/containerd" --version | awk '{print $3}' | sed 's/^v//' | cut -d. -f1,2)
    ln -sfn "$s" "$cache/$v"
done
