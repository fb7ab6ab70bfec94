// The start message of a hidden-state link: before a link carries batches, its receiver
// tells each of its senders where to begin (dflash_train: the drafter sends each target
// the position its sample stream resumes from, train/stream_cursor.h).
//
// One message of `words` 64-bit words to each sender, over a communicator of the link's
// ranks made for it and freed after (collective over the link's ranks only, like the link
// itself), so it can match no other message of the job. The receiver's call and each
// sender's are made once, at the same point of the start on every end of the link, and
// before the link's own endpoints are built.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "topotrain/comm/hidden_state_link.h"

namespace topotrain::comm {

// On the receiver: `per_sender[i]` goes to ends.senders[i]; every entry has the same length.
void send_link_start(MPI_Comm comm, const LinkEnds& ends, const std::vector<std::vector<std::uint64_t>>& per_sender);
// On a sender: the `words` words its receiver sent it. Throws std::runtime_error when the
// receiver sent another number of words.
std::vector<std::uint64_t> receive_link_start(MPI_Comm comm, const LinkEnds& ends, int words);

}  // namespace topotrain::comm
