#include "mpi_types.h"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <vector>

#include "topotrain/core/error.h"

namespace topotrain::comm::detail {

MPI_Datatype mpi_type(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return MPI_FLOAT;
    case c10::ScalarType::Double: return MPI_DOUBLE;
    case c10::ScalarType::Int: return MPI_INT32_T;
    case c10::ScalarType::Long: return MPI_INT64_T;
    case c10::ScalarType::Short: return MPI_INT16_T;
    case c10::ScalarType::Char: return MPI_INT8_T;
    case c10::ScalarType::Byte: return MPI_UINT8_T;
    default: throw std::invalid_argument(cat("MPI cannot reduce tensors of type ", c10::toString(type)));
  }
}

void mpi_check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(cat(call, " failed: ", std::string(text, length)));
}

bool mpi_alive() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

namespace {

constexpr std::size_t kChunk = std::size_t{1} << 30;  // well below INT_MAX

// start(offset, count, request) for every chunk of `bytes`, in order: messages of one sender
// and tag match in the order they were sent, so the chunks land in order.
template <typename Start>
std::vector<MPI_Request> in_chunks(std::size_t bytes, Start start, const char* what) {
  std::vector<MPI_Request> requests;
  std::size_t offset = 0;
  do {
    const int count = static_cast<int>(std::min(bytes - offset, kChunk));
    requests.emplace_back();
    mpi_check(start(offset, count, &requests.back()), what);
    offset += static_cast<std::size_t>(count);
  } while (offset < bytes);
  return requests;
}

void wait_all(std::vector<MPI_Request>& requests) {
  mpi_check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
}

}  // namespace

void send_bytes(const void* data, std::size_t bytes, int peer, int tag, MPI_Comm comm) {
  std::vector<MPI_Request> requests = isend_bytes(data, bytes, peer, tag, comm);
  wait_all(requests);
}

void recv_bytes(void* data, std::size_t bytes, int peer, int tag, MPI_Comm comm) {
  std::vector<MPI_Request> requests = irecv_bytes(data, bytes, peer, tag, comm);
  wait_all(requests);
}

std::vector<MPI_Request> isend_bytes(const void* data, std::size_t bytes, int peer, int tag, MPI_Comm comm) {
  return in_chunks(
      bytes,
      [&](std::size_t offset, int count, MPI_Request* request) {
        return MPI_Isend(static_cast<const char*>(data) + offset, count, MPI_BYTE, peer, tag, comm, request);
      },
      "MPI_Isend");
}

std::vector<MPI_Request> irecv_bytes(void* data, std::size_t bytes, int peer, int tag, MPI_Comm comm) {
  return in_chunks(
      bytes,
      [&](std::size_t offset, int count, MPI_Request* request) {
        return MPI_Irecv(static_cast<char*>(data) + offset, count, MPI_BYTE, peer, tag, comm, request);
      },
      "MPI_Irecv");
}

}  // namespace topotrain::comm::detail
