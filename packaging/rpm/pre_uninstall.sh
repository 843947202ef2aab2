# rdma-node-agent %preun: on erase, stop the service and put back every file the
# agent changed while the binary is still here. Never fails the erase.
if [ "$1" -eq 0 ]; then
    systemctl --no-reload disable --now rdma-node-agent.service >/dev/null 2>&1 || :
    /usr/bin/rdma-node-agent revert || echo "rdma-node-agent: revert failed; originals are kept in /var/lib/rdma-node-agent/originals" >&2
fi
