#include "topotrain/comm/link_start.h"

#include <stdexcept>

#include "link_comm.h"
#include "mpi_types.h"
#include "topotrain/comm/watchdog.h"
#include "topotrain/core/error.h"

namespace topotrain::comm {
namespace {

// Alone on its communicator, so any tag would do; one is named for the reader of a trace.
constexpr int kStartTag = 0;

// Frees the start's communicator however the exchange ends.
struct StartComm {
  MPI_Comm link;
  StartComm(MPI_Comm comm, const LinkEnds& ends) : link(detail::create_link_comm(comm, ends)) {}
  ~StartComm() { detail::free_link_comm(link); }
  StartComm(const StartComm&) = delete;
  StartComm& operator=(const StartComm&) = delete;
};

}  // namespace

void send_link_start(MPI_Comm comm, const LinkEnds& ends, const std::vector<std::vector<std::uint64_t>>& per_sender) {
  if (per_sender.size() != ends.senders.size())
    throw std::invalid_argument(cat("send_link_start: ", per_sender.size(), " start messages for ",
                                    ends.senders.size(), " senders"));
  StartComm start(comm, ends);
  for (std::size_t i = 0; i < per_sender.size(); ++i)
    detail::mpi_check(MPI_Send(per_sender[i].data(), static_cast<int>(per_sender[i].size()), MPI_UINT64_T,
                               static_cast<int>(i) + 1, kStartTag, start.link),
                      "MPI_Send (link start)");
}

std::vector<std::uint64_t> receive_link_start(MPI_Comm comm, const LinkEnds& ends, int words) {
  StartComm start(comm, ends);
  MPI_Status status;
  wait_for_message(0, kStartTag, start.link, &status, "MPI_Iprobe (link start)");
  int count = 0;
  MPI_Get_count(&status, MPI_UINT64_T, &count);
  if (count != words)
    throw std::runtime_error(cat("the start message from rank ", ends.receiver, " holds ", count, " words, expected ",
                                 words, ": both ends must run the same build"));
  std::vector<std::uint64_t> received(static_cast<std::size_t>(words));
  detail::mpi_check(MPI_Recv(received.data(), words, MPI_UINT64_T, 0, kStartTag, start.link, MPI_STATUS_IGNORE),
                    "MPI_Recv (link start)");
  return received;
}

}  // namespace topotrain::comm
