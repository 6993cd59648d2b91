#include "train/model.h"

#include <set>

#include "train/init_file.h"

namespace shardema {

Status TrainModel::InitFromFile(ShardedParameterStore* store, const std::string& path) {
  std::set<std::string> optional;
  for (const auto& alias : TiedNames()) optional.insert(alias.first);
  return InitStoreFromFile(store, path, optional, "the model's flags");
}

nlohmann::json TrainModel::MetaSections() const {
  const std::map<std::string, std::string> tied = TiedNames();
  if (tied.empty()) return nlohmann::json::object();
  return {{"tied_weights", tied}};  // exported under both names (checkpoint/export.h)
}

}  // namespace shardema
