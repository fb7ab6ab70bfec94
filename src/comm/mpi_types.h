// MPI helpers shared by the comm sources (internal header).
#pragma once

#include <mpi.h>

#include <c10/core/ScalarType.h>

#include <cstddef>
#include <string>
#include <vector>

namespace topotrain::comm::detail {

// The MPI datatype of a tensor element type MPI can reduce; throws for bf16, fp16 and
// types MPI lacks (callers stage 16-bit floats in fp32).
MPI_Datatype mpi_type(c10::ScalarType type);

// Throws std::runtime_error naming `call` when an MPI call did not succeed.
void mpi_check(int code, const char* call);

// Whether MPI is still usable (initialised and not finalised): destructors that free
// communicators must not call MPI after MPI_Finalize.
bool mpi_alive();

// Byte transfers of any size: MPI counts are int, so large buffers go in chunks.
void send_bytes(const void* data, std::size_t bytes, int peer, int tag, MPI_Comm comm);
void recv_bytes(void* data, std::size_t bytes, int peer, int tag, MPI_Comm comm);
// Without waiting: one request per chunk, complete when all are (MPI_Testall).
std::vector<MPI_Request> isend_bytes(const void* data, std::size_t bytes, int peer, int tag, MPI_Comm comm);
std::vector<MPI_Request> irecv_bytes(void* data, std::size_t bytes, int peer, int tag, MPI_Comm comm);

}  // namespace topotrain::comm::detail
