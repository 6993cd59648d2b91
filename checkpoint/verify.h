// VerifyCheckpoint: a full integrity check of a committed checkpoint, reading every byte once.
//
// Checks the manifest (against manifest.xxh3, then every invariant of Manifest::FromJson, then the
// meta's schema: checkpoint/meta_schema.h, what resume reads, naming the field), and for every
// rank file: presence, exact size, header fields, the whole-file XXH3 and every chunk XXH3.
// All problems found are listed in the error, one per line (files are checked independently).
//
// Errors: kNotFound (missing checkpoint, `latest` target or rank file), kDataLoss (anything that
// does not match), kUnimplemented (another format version). Memory: one 8 MiB read buffer.
// Threading: thread-safe (no shared state).
#ifndef SHARDEMA_CHECKPOINT_VERIFY_H_
#define SHARDEMA_CHECKPOINT_VERIFY_H_

#include <cstdint>
#include <string>

#include "framework/status.h"

namespace shardema {

struct VerifiedCheckpoint {
  std::string dir;  // the resolved checkpoint directory
  int64_t step = 0;
  int world_size = 0;
  uint64_t bytes = 0;  // rank-file bytes checked
};

// `path`: a checkpoint directory or a root (its `latest` is verified).
StatusOr<VerifiedCheckpoint> VerifyCheckpoint(const std::string& path);

}  // namespace shardema

#endif  // SHARDEMA_CHECKPOINT_VERIFY_H_
