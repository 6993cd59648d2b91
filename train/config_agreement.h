// AgreeOnConfig: every rank of a job must run with the same configuration.
//
// Ranks started with different arguments (one rank given another --lr, --seed or --batch) would
// otherwise train silently on inconsistent settings. At start, the trainer passes its full
// configuration as JSON (TrainConfig::AgreementJson) and every rank compares it with every
// other rank's.
//
// AgreeOnConfig(config, comm): collective; one all-gather of each rank's JSON text (a few KiB).
// OK on every rank when all texts are equal. Otherwise kInvalidArgument on every rank naming the
// first differing key (JSON object keys sort alphabetically) as a flag ("--lr", from key "lr"),
// rank 0's value, and each rank whose value differs with its value, e.g.
//   "ranks were started with different arguments: --lr is 0.001 on rank 0 but 0.002 on rank 1"
// The communicator's own errors are returned as they are. A null communicator (one process)
// agrees trivially. Threading: as the communicator's.
#ifndef SHARDEMA_TRAIN_CONFIG_AGREEMENT_H_
#define SHARDEMA_TRAIN_CONFIG_AGREEMENT_H_

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "framework/communicator.h"
#include "framework/status.h"

namespace shardema {

Status AgreeOnConfig(const nlohmann::json& config, Communicator* comm);

// The comparison itself, for tests: `configs[r]` is rank r's JSON. OK when all are equal.
Status CompareRankConfigs(const std::vector<nlohmann::json>& configs);

}  // namespace shardema

#endif  // SHARDEMA_TRAIN_CONFIG_AGREEMENT_H_
