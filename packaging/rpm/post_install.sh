# rdma-node-agent %post: enable per the system's presets and start on first install.
# The package ships 50-rdma-node-agent.preset (enable), read before a distribution's
# `disable *`; an admin's preset in /etc/systemd/system-preset can still say disable.
systemctl daemon-reload >/dev/null 2>&1 || :
if [ "$1" -eq 1 ]; then
    systemctl preset rdma-node-agent.service >/dev/null 2>&1 || :
    if systemctl is-enabled --quiet rdma-node-agent.service 2>/dev/null; then
        systemctl start rdma-node-agent.service >/dev/null 2>&1 || :
    fi
fi
