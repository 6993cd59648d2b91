#include "train/config_agreement.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "checkpoint/collective_bytes.h"

namespace shardema {
namespace {

// "ema_start_step" -> "--ema-start-step".
std::string FlagName(const std::string& key) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::string ValueText(const nlohmann::json& config, const std::string& key) {
  return config.contains(key) ? config.at(key).dump() : std::string("(missing)");
}

}  // namespace

Status CompareRankConfigs(const std::vector<nlohmann::json>& configs) {
  if (configs.size() < 2) return Status::Ok();
  const nlohmann::json& first = configs[0];
  // Keys in rank 0's order, then keys only other ranks have.
  std::vector<std::string> keys;
  std::set<std::string> seen;
  for (const nlohmann::json& c : configs) {
    if (!c.is_object()) return InvalidArgument("configuration is not a JSON object: ", c.dump());
    for (auto it = c.begin(); it != c.end(); ++it) {
      if (seen.insert(it.key()).second) keys.push_back(it.key());
    }
  }
  for (const std::string& key : keys) {
    const std::string mine = ValueText(first, key);
    std::ostringstream others;
    int differing = 0;
    for (size_t r = 1; r < configs.size(); ++r) {
      const std::string theirs = ValueText(configs[r], key);
      if (theirs == mine) continue;
      others << (differing++ ? ", " : "") << theirs << " on rank " << r;
    }
    if (differing > 0) {
      return InvalidArgument("ranks were started with different arguments: ", FlagName(key), " is ",
                             mine, " on rank 0 but ", others.str());
    }
  }
  return Status::Ok();
}

Status AgreeOnConfig(const nlohmann::json& config, Communicator* comm) {
  if (comm == nullptr || comm->world_size() == 1) return Status::Ok();
  ASSIGN_OR_RETURN(std::vector<std::string> texts, AllGatherBytes(comm, config.dump()));
  std::vector<nlohmann::json> configs;
  for (size_t r = 0; r < texts.size(); ++r) {
    nlohmann::json j = nlohmann::json::parse(texts[r], nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Internal("configuration of rank ", r, " is not valid JSON");
    configs.push_back(std::move(j));
  }
  return CompareRankConfigs(configs);
}

}  // namespace shardema
