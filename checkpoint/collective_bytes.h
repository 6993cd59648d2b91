// Byte strings over a Communicator: the bytes travel as DType::kU8 elements, after their 64-bit
// lengths (8 u8 elements each, in the host's byte order: every rank runs the same build).
//
// Every call is collective over `comm` (same calls, same order on all ranks). `comm` may be null:
// a single process (rank 0 of 1). The communicator must take host buffers (the MPI backend; with
// NCCL pass the host communicator used beside it). Errors: the communicator's; kInvalidArgument
// for a communicator on a CUDA device.
// Threading: as the communicator (one thread at a time).
#ifndef SHARDEMA_CHECKPOINT_COLLECTIVE_BYTES_H_
#define SHARDEMA_CHECKPOINT_COLLECTIVE_BYTES_H_

#include <string>
#include <vector>

#include "framework/communicator.h"
#include "framework/status.h"

namespace shardema {

int RankOf(const Communicator* comm);       // 0 when null
int WorldSizeOf(const Communicator* comm);  // 1 when null

// Strings up to this many bytes travel in ONE fixed-size collective (length + inline bytes);
// longer ones take a second collective for the rest, padded to the longest.
constexpr size_t kCollectiveBytesInline = 4096;

// Every rank gets every rank's string, indexed by rank. One all-gather of fixed-size frames when
// every string fits kCollectiveBytesInline, else a second one for the rest.
StatusOr<std::vector<std::string>> AllGatherBytes(Communicator* comm, const std::string& mine);

// Every rank gets `root`'s string (the value passed on other ranks is ignored). One broadcast
// when it fits kCollectiveBytesInline, else two.
StatusOr<std::string> BroadcastBytes(Communicator* comm, const std::string& value, int root = 0);

// Agrees on an outcome: OK on every rank when `local` is OK on every rank, otherwise every rank
// returns the first failing rank's status with the message prefixed by "<what>: rank R of W: "
// (the code is kept). The communicator's own errors are returned as they are.
Status AgreeOnStatus(Communicator* comm, const Status& local, const std::string& what);

// Status <-> bytes (code and message), for sending a Status to other ranks.
std::string EncodeStatus(const Status& s);
Status DecodeStatus(const std::string& bytes);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_COLLECTIVE_BYTES_H_
