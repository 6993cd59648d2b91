// Parameter initialisation for models (train/model.h TrainModel::Init / InitFromFile).
//
// From a seed: InitUniform / InitNormal fill a parameter from SeededRng(seed, name)
// (framework/rng.h), so a value depends only on the seed and the parameter's name, never on the
// world size; LinearInitBound is torch.nn.Linear's default bound 1/sqrt(fan_in) (weight and bias).
//
// From a file: InitStoreFromFile opens an --init safetensors file (or a sharded export through its
// index), checks it (CheckInitFile below) and fills every store parameter by name (F32/BF16/F16).
//
// CheckInitFile lists every problem at once (the header is the same on every rank, so all ranks
// fail alike): a parameter missing (with its expected shape), a shape or dtype (not F32/BF16/F16)
// that differs, a tensor that is neither a parameter nor in `optional` or `ignored`. Optional
// tensors are checked for dtype only; ignored ones not at all. InitFileRules::file_shape gives the
// shape the file holds for a parameter when it is not the parameter's own (e.g. a transposed
// layout; the caller then reads and converts it). The error is kInvalidArgument "--init '<path>'
// does not match the model
// (<model_flags>):" followed by one line per problem.
#ifndef SHARDEMA_TRAIN_INIT_FILE_H_
#define SHARDEMA_TRAIN_INIT_FILE_H_

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "checkpoint/safetensors_index.h"
#include "framework/status.h"
#include "fsdp/layout.h"
#include "fsdp/store.h"

namespace shardema {

void InitUniform(float* out, int64_t n, double bound, uint64_t seed, const std::string& name);
void InitNormal(float* out, int64_t n, double std, uint64_t seed, const std::string& name);
double LinearInitBound(int64_t fan_in);

// Errors: the file's (kNotFound, kDataLoss: "--init" in front), CheckInitFile's.
Status InitStoreFromFile(ShardedParameterStore* store, const std::string& path,
                         const std::set<std::string>& optional, const std::string& model_flags);

struct InitFileRules {
  std::set<std::string> optional;  // may be absent; a float dtype when present
  std::set<std::string> ignored;   // skipped whatever they hold (another framework's buffers)
  std::function<Shape(const ParamLayout&)> file_shape;  // default: the parameter's shape
};

Status CheckInitFile(const SafetensorsSet& f, const StoreLayout& layout, const InitFileRules& rules,
                     const std::string& model_flags);

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_INIT_FILE_H_
