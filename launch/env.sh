# Source this before running topotrain with mpirun: library paths and MPI settings that
# every launch needs.   source launch/env.sh
_tt_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -d $_tt_root/.deps/root/usr/lib/x86_64-linux-gnu ]]; then
  export LD_LIBRARY_PATH=$_tt_root/.deps/root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# The LibTorch launch/build.sh builds against (launch/torch.sh); its programs carry that
# path too, but tools started from elsewhere (a profiler, python3 with the same torch) need it.
source "$_tt_root/launch/torch.sh"
if _tt_torch=$(topotrain_libtorch 2>/dev/null); then
  export LD_LIBRARY_PATH=$_tt_torch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# One intra-op thread per rank: ranks share the cores; GPU ranks need no CPU threads.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# Open MPI refuses to run as root unless told; containers often run as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# NVLink SHARP (multicast) off: not needed for our collectives and fragile in containers.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export PATH=$_tt_root/${BUILD_DIR_NAME:-build}/bin:$PATH
unset _tt_root _tt_torch
unset -f topotrain_torch_python topotrain_libtorch
