# rdma-node-agent %post: enable per the system's presets and start on first install.
systemctl daemon-reload >/dev/null 2>&1 || :
if [ "$1" -eq 1 ]; then
    systemctl preset rdma-node-agent.service >/dev/null 2>&1 || :
    if systemctl is-enabled --quiet rdma-node-agent.service 2>/dev/null; then
        systemctl start rdma-node-agent.service >/dev/null 2>&1 || :
    fi
fi
