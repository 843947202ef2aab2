# rdma-node-agent %postun: restart on upgrade; on erase remove the agent's state
# (only when revert emptied its ledger, so originals are never lost).
systemctl daemon-reload >/dev/null 2>&1 || :
if [ "$1" -ge 1 ]; then
    systemctl try-restart rdma-node-agent.service >/dev/null 2>&1 || :
elif [ ! -e /var/lib/rdma-node-agent/ledger.json ]; then
    rm -rf /var/lib/rdma-node-agent /run/rdma-node-agent
fi
