#include "framework/cpu_isa.h"

#include <atomic>
#include <cstdlib>

#include "framework/cpu_features.h"

namespace shardema {
namespace {

// 0: not chosen yet; otherwise the CpuIsa value.
std::atomic<uint8_t> g_active{0};

}  // namespace

const char* CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kV4: return "v4";
    case CpuIsa::kV3: return "v3";
    default: return "v2";
  }
}

bool CpuSupports(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kV2: return true;
    case CpuIsa::kV3: return CpuHasX86_64V3();
    case CpuIsa::kV4: return CpuHasX86_64V4();
  }
  return false;
}

std::vector<CpuIsa> SupportedCpuIsas() {
  std::vector<CpuIsa> isas;
  for (CpuIsa isa : {CpuIsa::kV2, CpuIsa::kV3, CpuIsa::kV4}) {
    if (CpuSupports(isa)) isas.push_back(isa);
  }
  return isas;
}

CpuIsa BestCpuIsa() {
  if (CpuPrefersAvx512()) return CpuIsa::kV4;
  return CpuHasX86_64V3() ? CpuIsa::kV3 : CpuIsa::kV2;
}

StatusOr<CpuIsa> ParseCpuIsa(const std::string& value) {
  if (value.empty() || value == "auto") return BestCpuIsa();
  CpuIsa isa;
  if (value == "v2") {
    isa = CpuIsa::kV2;
  } else if (value == "v3") {
    isa = CpuIsa::kV3;
  } else if (value == "v4") {
    isa = CpuIsa::kV4;
  } else {
    return InvalidArgument("CPU ISA '", value, "' is not one of auto, v2, v3, v4");
  }
  if (!CpuSupports(isa)) {
    return FailedPrecondition(
        "CPU ISA ", CpuIsaName(isa),
        " requested but this CPU lacks it (x86-64-v3 needs AVX2, FMA, BMI1/2, "
        "F16C, LZCNT, MOVBE; x86-64-v4 also AVX-512 F, BW, CD, DQ, VL); use a lower one or auto");
  }
  return isa;
}

StatusOr<CpuIsa> CpuIsaFromEnv() {
  const char* v = std::getenv("SHARDEMA_CPU_ISA");
  StatusOr<CpuIsa> isa = ParseCpuIsa(v == nullptr ? "" : v);
  if (!isa.ok()) return isa.status().WithContext("SHARDEMA_CPU_ISA");
  return isa;
}

Status SetCpuIsa(CpuIsa isa) {
  if (!CpuSupports(isa)) {
    return FailedPrecondition("SetCpuIsa: this CPU cannot run ", CpuIsaName(isa));
  }
  g_active.store(static_cast<uint8_t>(isa), std::memory_order_relaxed);
  return Status::Ok();
}

CpuIsa ActiveCpuIsa() {
  uint8_t v = g_active.load(std::memory_order_relaxed);
  if (v == 0) {
    StatusOr<CpuIsa> from_env = CpuIsaFromEnv();
    uint8_t expected = 0;
    const uint8_t chosen = static_cast<uint8_t>(from_env.ok() ? *from_env : CpuIsa::kV2);
    // The first caller decides; a concurrent first call reads the same environment anyway.
    g_active.compare_exchange_strong(expected, chosen, std::memory_order_relaxed);
    v = g_active.load(std::memory_order_relaxed);
  }
  return static_cast<CpuIsa>(v);
}

}  // namespace shardema
