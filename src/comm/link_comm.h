// The communicator of one hidden-state link's ranks (internal header): the link itself and
// the start message before it (link_start.h) each make their own, so their messages never
// meet each other's or any other of the job.
#pragma once

#include <mpi.h>

#include "topotrain/comm/hidden_state_link.h"

namespace topotrain::comm::detail {

// The link's ranks, receiver first: collective over the link's ranks only, so ranks outside
// the link are not involved. The receiver's rank tells links apart.
MPI_Comm create_link_comm(MPI_Comm comm, const LinkEnds& ends);
// Frees it unless it is null or MPI is already finalised.
void free_link_comm(MPI_Comm& link);

}  // namespace topotrain::comm::detail
