#include "examples/test_files.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>

#include "checkpoint/safetensors.h"

namespace shardema::examples {

std::string TestPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

Status WriteSafetensorsFile(const std::string& path,
                            const std::map<std::string, RawTensor>& tensors) {
  std::vector<SafetensorsTensor> meta;
  for (const auto& kv : tensors) meta.push_back({kv.first, kv.second.dtype, kv.second.shape, 0, 0});
  RETURN_IF_ERROR(AssignSafetensorsOffsets(meta).status());
  ASSIGN_OR_RETURN(std::string header, BuildSafetensorsHeader(meta, {}));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << header;
  for (const SafetensorsTensor& t : meta) out << tensors.at(t.name).bytes;
  out.close();
  if (!out) return ErrnoToStatus(errno, "write '" + path + "'");
  return Status::Ok();
}

std::vector<std::string> SplitArgs(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b < s.size()) {
    size_t e = s.find(' ', b);
    if (e == std::string::npos) e = s.size();
    if (e > b) out.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

MlpConfig ParseTestConfig(const std::string& args) {
  StatusOr<ParsedMlpArgs> p = ParseMlpConfig(SplitArgs(args));
  EXPECT_TRUE(p.ok()) << p.status() << " for " << args;
  return p.ok() ? p->config : MlpConfig{};
}

}  // namespace shardema::examples
