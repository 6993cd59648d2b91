#include "framework/fault_injection.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace shardema {
namespace {

bool ParseInt(const std::string& s, long long* out) {
  if (s.empty() || s.size() > 12) return false;
  long long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *out = v;
  return true;
}

int WorldRankFromEnv() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    const char* v = std::getenv(name);
    long long r = 0;
    if (v != nullptr && ParseInt(v, &r)) return int(r);
  }
  return 0;
}

struct Armed {
  bool armed = false;
  FaultSpec spec;
  std::atomic<long long> calls{0};
};

Status Arm(Armed& a, const std::string& value) {
  a.armed = false;
  a.calls.store(0, std::memory_order_relaxed);
  if (value.empty()) return Status::Ok();
  a.spec = ParseFaultSpec(value);
  if (!a.spec.ok) return InvalidArgument(a.spec.error);
  a.armed = a.spec.rank == WorldRankFromEnv();
  return Status::Ok();
}

Armed& GetArmed() {
  static Armed* armed = [] {
    auto* a = new Armed;
    const char* v = std::getenv("SHARDEMA_INJECT_FAULT");
    if (v == nullptr || *v == '\0') return a;
    const Status st = Arm(*a, v);
    if (!st.ok())
      std::fprintf(stderr, "SHARDEMA_INJECT_FAULT='%s' ignored: %s\n", v, st.message().c_str());
    return a;
  }();
  return *armed;
}

}  // namespace

FaultSpec ParseFaultSpec(const std::string& value) {
  FaultSpec f;
  const size_t at = value.find('@');
  if (at == std::string::npos || at == 0) {
    f.error = "expected SITE@RANK[#N]";
    return f;
  }
  f.site = value.substr(0, at);
  std::string rest = value.substr(at + 1);
  const size_t hash = rest.find('#');
  long long rank = 0, call = 1;
  if (!ParseInt(rest.substr(0, hash), &rank)) {
    f.error = "RANK '" + rest.substr(0, hash) + "' is not a non-negative integer";
    return f;
  }
  if (hash != std::string::npos && (!ParseInt(rest.substr(hash + 1), &call) || call < 1)) {
    f.error = "N '" + rest.substr(hash + 1) + "' is not an integer >= 1";
    return f;
  }
  f.rank = int(rank);
  f.call = call;
  f.ok = true;
  return f;
}

Status InjectedFault(const char* site) {
  Armed& a = GetArmed();
  if (!a.armed || a.spec.site != site) return Status::Ok();
  const long long n = a.calls.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n != a.spec.call) return Status::Ok();
  return Internal("injected fault at ", site, " on rank ", a.spec.rank, " (call ", n, ")");
}

Status ArmInjectedFault(const std::string& value) { return Arm(GetArmed(), value); }

}  // namespace shardema
