//! rdma-node-agent: host preparation and RDMA health for Kubernetes nodes.
