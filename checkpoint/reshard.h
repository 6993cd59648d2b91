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
// Commit: the rank files are written into dst_root/.tmp_step_N and committed with the writer's
// protocol (manifest last, fsyncs, rename, `latest`), under dst_root's RootLock. A kill at any
// point leaves either no step_N (a .tmp_ directory the next run removes) or a complete one. A
// re-run finding a committed step_N equal to its plan verifies it, points `latest` at it if
// needed and returns it without writing. Nothing committed in dst_root is ever deleted or
// replaced, and nothing is ever written to the source.
//
// Errors: the reader's (kNotFound, kDataLoss, ...); kInvalidArgument for new_world < 1, for
// new_world larger than the element count of the checkpoint's largest unit (the stated bound:
// every new rank must hold at least one element of every unit's largest), and for a dst_root
// that is, contains or is inside the source (canonical paths, symlinks resolved; both named);
// kAlreadyExists when dst_root holds a different committed checkpoint of this step;
// kFailedPrecondition when another process holds dst_root's lock; write errors
// (kResourceExhausted for ENOSPC). On error nothing is committed in dst_root.
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
  SaveOptions save;                          // chunk size, io size, fsync, keep_last of dst_root
  uint64_t piece_bytes = uint64_t(8) << 20;  // largest read-and-append piece
  size_t cache_chunks = 2;
};

// kInvalidArgument naming both paths when dst_root is, contains or is inside `source` (canonical
// paths, symlinks resolved). Callers that resolved a root to one of its checkpoints check the
// root they were given too (ReshardCheckpoint checks `src` and its checkpoint directory).
Status CheckReshardOutput(const std::string& source, const std::string& dst_root);

// Returns the committed directory dst_root/step_N.
StatusOr<std::string> ReshardCheckpoint(const std::string& src, int new_world,
                                        const std::string& dst_root,
                                        const ReshardOptions& options = {});

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_RESHARD_H_
