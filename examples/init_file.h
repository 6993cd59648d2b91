// Checking an --init safetensors file (or a sharded export through its index) against the store's
// parameters (train_mlp, train_gpt).
//
// CheckInitFile lists every problem at once (the header is the same on every rank, so all ranks
// fail alike): a parameter missing (with its expected shape), a shape or dtype (not F32/BF16/F16)
// that differs, a tensor that is neither a parameter nor in `optional`. Optional tensors are
// checked for dtype only. The error is kInvalidArgument "--init '<path>' does not match the model
// (<model_flags>):" followed by one line per problem.
#ifndef SHARDEMA_EXAMPLES_INIT_FILE_H_
#define SHARDEMA_EXAMPLES_INIT_FILE_H_

#include <set>
#include <string>

#include "checkpoint/safetensors_index.h"
#include "framework/status.h"
#include "fsdp/layout.h"

namespace shardema::examples {

Status CheckInitFile(const SafetensorsSet& f, const StoreLayout& layout,
                     const std::set<std::string>& optional, const std::string& model_flags);

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_INIT_FILE_H_
