#include "link_comm.h"

#include <vector>

#include "mpi_types.h"

namespace topotrain::comm::detail {

MPI_Comm create_link_comm(MPI_Comm comm, const LinkEnds& ends) {
  std::vector<int> members{ends.receiver};
  members.insert(members.end(), ends.senders.begin(), ends.senders.end());
  MPI_Group all, group;
  MPI_Comm_group(comm, &all);
  mpi_check(MPI_Group_incl(all, static_cast<int>(members.size()), members.data(), &group), "MPI_Group_incl");
  MPI_Comm link = MPI_COMM_NULL;
  mpi_check(MPI_Comm_create_group(comm, group, ends.receiver, &link), "MPI_Comm_create_group");
  MPI_Group_free(&group);
  MPI_Group_free(&all);
  return link;
}

void free_link_comm(MPI_Comm& link) {
  if (link != MPI_COMM_NULL && mpi_alive()) MPI_Comm_free(&link);
}

}  // namespace topotrain::comm::detail
