// Test helpers for the trainer's tests: temporary paths and small safetensors files.
#ifndef SHARDEMA_EXAMPLES_TEST_FILES_H_
#define SHARDEMA_EXAMPLES_TEST_FILES_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "examples/mlp_train.h"
#include "framework/status.h"
#include "framework/tensor.h"

namespace shardema::examples {

// $TEST_TMPDIR/name (or /tmp/name outside Bazel). Every rank of an mpirun job gets the same path.
std::string TestPath(const std::string& name);

// One tensor of a safetensors file: dtype name ("F32", "I64", ...), shape and raw bytes.
struct RawTensor {
  std::string dtype;
  Shape shape;
  std::string bytes;
};
template <typename T>
RawTensor MakeRawTensor(const std::string& dtype, Shape shape, const std::vector<T>& values) {
  return RawTensor{
      dtype, std::move(shape),
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T))};
}

// Writes a safetensors file (checkpoint/safetensors.h header rules). Errors: kInvalidArgument for
// a bad tensor description, errno errors naming the path.
Status WriteSafetensorsFile(const std::string& path,
                            const std::map<std::string, RawTensor>& tensors);

// Splits a command line at spaces: "--a 1 --b" -> {"--a", "1", "--b"}.
std::vector<std::string> SplitArgs(const std::string& s);

// Parses train_mlp flags given as one string; a parse error fails the calling test (gtest
// EXPECT) and returns the default MlpConfig.
MlpConfig ParseTestConfig(const std::string& args);

}  // namespace shardema::examples

#endif  // SHARDEMA_EXAMPLES_TEST_FILES_H_
