#!/usr/bin/env bash
# An rsh agent that has mpirun start the daemons of a hostfile's "remote" nodes on this
# machine, so that one machine tests a launch across nodes (moe_train_e2e.sh, nodes):
#   mpirun --mca plm_rsh_agent tests/train/emulated_node_agent.sh --hostfile HOSTS ...
# mpirun calls it as "AGENT [ssh options] HOST COMMAND..."; it runs COMMAND here as node
# HOST: in a UTS namespace named HOST where the kernel allows one (so that the ranks'
# processor names, and topotrain's rank table, name their node), and, for every node but
# EMULATED_FIRST_NODE, with an empty tmpfs over EMULATED_PRIVATE_DIR when that is set: a
# directory that node does not share.
set -euo pipefail
while [[ $1 == -* ]]; do shift; done
host=$1
shift
if ! unshare --uts true 2>/dev/null; then exec bash -c "$*"; fi
if [[ -n ${EMULATED_PRIVATE_DIR:-} && $host != "${EMULATED_FIRST_NODE:-}" ]]; then
  exec unshare --uts --mount --propagation private \
    bash -c "hostname '$host' && mount -t tmpfs emulated-node '$EMULATED_PRIVATE_DIR' && $*"
fi
exec unshare --uts bash -c "hostname '$host' && $*"
