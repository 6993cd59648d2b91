// ReshardCheckpoint: offline conversion of a committed checkpoint to another world size, in one
// process and bounded memory.
//
// Reads `src` (a checkpoint directory or a root's `latest`), and writes a checkpoint of the same
// step, model, slots, buffers and meta at world size `new_world` into the root `dst_root`
// (dst_root/step_N + dst_root/latest, same commit protocol as a save). Each new rank file is
// streamed: for every slot and unit the new rank's range is read from the old files in pieces of
// at most `piece_bytes` (verifying the checksum chunks touched) and appended; new padding is zero.
// The result is bit-exact per slot: loading either checkpoint at any world size gives the same
// values.
//
// Errors: the reader's (kNotFound, kDataLoss, ...), kInvalidArgument for new_world < 1,
// kAlreadyExists when dst_root's latest is already this step (pick another dst_root), write
// errors (kResourceExhausted for ENOSPC). On error nothing is committed in dst_root.
// Memory: piece_bytes + cache_chunks * chunk_bytes + one write buffer (save.io_bytes).
// Threading: thread-safe for distinct roots.
#ifndef SHARDEMA_CHECKPOINT_RESHARD_H_
#define SHARDEMA_CHECKPOINT_RESHARD_H_

#include <cstdint>
#include <string>

#include "checkpoint/writer.h"
#include "framework/status.h"

namespace shardema {

struct ReshardOptions {
  SaveOptions save;                         // chunk size, io size, fsync, keep_last of dst_root
  uint64_t piece_bytes = uint64_t(8) << 20;  // largest read-and-append piece
  size_t cache_chunks = 2;
};

// Returns the committed directory dst_root/step_N.
StatusOr<std::string> ReshardCheckpoint(const std::string& src, int new_world, const std::string& dst_root,
                                        const ReshardOptions& options = {});

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_RESHARD_H_
