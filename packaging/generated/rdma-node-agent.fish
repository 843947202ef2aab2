# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_rdma_node_agent_global_optspecs
    string join \n root= config= h/help V/version
end

function __fish_rdma_node_agent_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_rdma_node_agent_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_rdma_node_agent_using_subcommand
    set -l cmd (__fish_rdma_node_agent_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -s V -l version -d 'Print version'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "check" -d 'Read-only checks. Exit 0 ok, 1 a check failed, 2 could not tell (node-problem-detector\'s convention)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "plan" -d 'Show what `apply` would change, files as unified diffs'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "apply" -d 'Converge the host; a second run changes nothing'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "serve" -d 'Run as a daemon: keep the node converged (or only report, with mode = "report") and serve /healthz, /readyz, /status and /metrics'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "status" -d 'Ask the running daemon for its last report (the same checks as `check`)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "selftest" -d 'For each ACTIVE RDMA port, perftest\'s ib_write_bw loopback with the memlock pods get (and no CAP_IPC_LOCK), then with 64 KiB as a control; the bandwidth against the port\'s rate. Exit 0 every port passed, 1 one failed, 2 nothing could be tested (no RDMA, no ACTIVE port, no perftest). Its verdict is kept for the return-to-service gate'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "fleet" -d 'Ask Prometheus which nodes cannot run RDMA jobs and why, and which differ from their peers'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "gate" -d 'The return-to-service gate (`[peers] gate = true`)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "pci-config" -d 'The privileged helper systemd runs for the daemon (PCI config space)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "kernel-log" -d 'The privileged helper systemd runs for the daemon (the kernel log)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "generate-assets" -d 'Write the man page and shell completions generated from this CLI into DIR (for packaging)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "revert" -d 'Restore every file the agent changed to its original bytes and remove what it created'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand check" -l only -d 'Report only this check (repeatable), e.g. for one node-problem-detector rule per check' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand check" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand check" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand check" -l json
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand check" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand plan" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand plan" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand plan" -l json
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand plan" -l exit-code -d 'Exit 2 when there are changes (0 when converged)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand plan" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand apply" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand apply" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand apply" -l json
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand apply" -l no-restart -d 'Change files only; leave restarts for later'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand apply" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand serve" -l listen -d 'Where the health endpoint listens (`host:port` or `unix:/path`); default from the config' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand serve" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand serve" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand serve" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand status" -l listen -d 'The daemon\'s endpoint; default from the config' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand status" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand status" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand status" -l json
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand status" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand selftest" -l device -d 'Only this RDMA device\'s ports (e.g. mlx5_0)' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand selftest" -l size -d 'Message size in bytes' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand selftest" -l min-percent -d 'The share of the port\'s rate the average must reach' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand selftest" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand selftest" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand selftest" -l json
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand selftest" -l no-control -d 'Skip the low-memlock control run'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand selftest" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l prometheus -d 'The query API\'s base URL: Prometheus, Thanos Query, or Mimir with its prefix (e.g. https://mimir.example/prometheus); <URL>/api/v1/query is asked' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l bearer-token-file -d 'A file holding a bearer token (never printed)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l basic-auth-user -d 'Basic auth user; its password comes from --basic-auth-password-file' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l basic-auth-password-file -d 'A file holding the basic auth password (never printed)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l ca-file -d 'PEM certificate(s) to trust besides the system\'s, for an https URL' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l max-answer-bytes -d 'The largest answer to one query that is read (bytes); a larger one is an error' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l node-label -d 'The label naming a node; series without it are named by `instance`' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l timeout -d 'How long each query may take (connect included)' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l flap-window -d 'The window in which flaps are counted; also how far back a node that stopped reporting is remembered' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l flap-threshold -d 'A port with more flaps than this within --flap-window is a flapper (the rule of the rdma.link check and the RDMALinkFlapping alert)' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l insecure-skip-verify -d 'Do not check the server\'s certificate (a test server; never across a network you do not own)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l allow-http-credentials -d 'Send the bearer token or basic auth password over a plain http:// URL (refused otherwise: anyone on the path can read them)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -l json -d 'Print the report as JSON (errors as {"error": …})'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand fleet" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand gate; and not __fish_seen_subcommand_from reset help" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand gate; and not __fish_seen_subcommand_from reset help" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand gate; and not __fish_seen_subcommand_from reset help" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand gate; and not __fish_seen_subcommand_from reset help" -f -a "reset" -d 'Close the gate (after a repair): the node reports not ready for RDMA jobs until the loopback selftest and a round of peer probes pass again. Asks the running daemon (a request file it watches), which keeps the gate\'s state'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand gate; and not __fish_seen_subcommand_from reset help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand gate; and __fish_seen_subcommand_from reset" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand gate; and __fish_seen_subcommand_from reset" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand gate; and __fish_seen_subcommand_from reset" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand gate; and __fish_seen_subcommand_from help" -f -a "reset" -d 'Close the gate (after a repair): the node reports not ready for RDMA jobs until the loopback selftest and a round of peer probes pass again. Asks the running daemon (a request file it watches), which keeps the gate\'s state'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand gate; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and not __fish_seen_subcommand_from read write-acs help" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and not __fish_seen_subcommand_from read write-acs help" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and not __fish_seen_subcommand_from read write-acs help" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and not __fish_seen_subcommand_from read write-acs help" -f -a "read" -d 'Read the whole config space of PCI bridges into /run/rdma-node-agent/pci-config/TOKEN.json'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and not __fish_seen_subcommand_from read write-acs help" -f -a "write-acs" -d 'Write a bridge\'s ACS control register once its identity and value are re-checked'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and not __fish_seen_subcommand_from read write-acs help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from read" -l token -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from read" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from read" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from read" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from write-acs" -l token -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from write-acs" -l vendor -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from write-acs" -l device -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from write-acs" -l class -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from write-acs" -l port-type -d 'The PCI Express port type, or `none`' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from write-acs" -l offset -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from write-acs" -l expect -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from write-acs" -l value -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from write-acs" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from write-acs" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from write-acs" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from help" -f -a "read" -d 'Read the whole config space of PCI bridges into /run/rdma-node-agent/pci-config/TOKEN.json'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from help" -f -a "write-acs" -d 'Write a bridge\'s ACS control register once its identity and value are re-checked'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand pci-config; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand kernel-log" -l token -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand kernel-log" -l prefix -d 'Keep the kernel\'s records whose text starts with this' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand kernel-log" -l after -d 'Records after this sequence number only' -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand kernel-log" -l max-bytes -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand kernel-log" -l max-records -r
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand kernel-log" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand kernel-log" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand kernel-log" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand generate-assets" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand generate-assets" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand generate-assets" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand revert" -l root -d 'Act on the tree under DIR instead of the live host (like `systemctl --root`)' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand revert" -l config -d 'The agent\'s config, resolved under --root [default: /etc/rdma-node-agent/config.toml, which may be absent (built-in defaults); a FILE given here must exist]' -r -F
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand revert" -l json
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand revert" -l force -d 'Also restore files that were edited by someone else since the agent wrote them'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand revert" -s h -l help -d 'Print help'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "check" -d 'Read-only checks. Exit 0 ok, 1 a check failed, 2 could not tell (node-problem-detector\'s convention)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "plan" -d 'Show what `apply` would change, files as unified diffs'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "apply" -d 'Converge the host; a second run changes nothing'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "serve" -d 'Run as a daemon: keep the node converged (or only report, with mode = "report") and serve /healthz, /readyz, /status and /metrics'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "status" -d 'Ask the running daemon for its last report (the same checks as `check`)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "selftest" -d 'For each ACTIVE RDMA port, perftest\'s ib_write_bw loopback with the memlock pods get (and no CAP_IPC_LOCK), then with 64 KiB as a control; the bandwidth against the port\'s rate. Exit 0 every port passed, 1 one failed, 2 nothing could be tested (no RDMA, no ACTIVE port, no perftest). Its verdict is kept for the return-to-service gate'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "fleet" -d 'Ask Prometheus which nodes cannot run RDMA jobs and why, and which differ from their peers'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "gate" -d 'The return-to-service gate (`[peers] gate = true`)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "pci-config" -d 'The privileged helper systemd runs for the daemon (PCI config space)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "kernel-log" -d 'The privileged helper systemd runs for the daemon (the kernel log)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "generate-assets" -d 'Write the man page and shell completions generated from this CLI into DIR (for packaging)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "revert" -d 'Restore every file the agent changed to its original bytes and remove what it created'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and not __fish_seen_subcommand_from check plan apply serve status selftest fleet gate pci-config kernel-log generate-assets revert help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and __fish_seen_subcommand_from gate" -f -a "reset" -d 'Close the gate (after a repair): the node reports not ready for RDMA jobs until the loopback selftest and a round of peer probes pass again. Asks the running daemon (a request file it watches), which keeps the gate\'s state'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and __fish_seen_subcommand_from pci-config" -f -a "read" -d 'Read the whole config space of PCI bridges into /run/rdma-node-agent/pci-config/TOKEN.json'
complete -c rdma-node-agent -n "__fish_rdma_node_agent_using_subcommand help; and __fish_seen_subcommand_from pci-config" -f -a "write-acs" -d 'Write a bridge\'s ACS control register once its identity and value are re-checked'
