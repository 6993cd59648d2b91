#include "framework/duration.h"

#include <cstdint>
#include <cstdio>

namespace shardema {

std::string FormatDuration(double seconds) {
  const int64_t s = seconds > 0 ? int64_t(seconds + 0.5) : 0;
  char buf[48];
  if (s < 60) {
    std::snprintf(buf, sizeof(buf), "%llds", static_cast<long long>(s));
  } else if (s < 3600) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60));
  }
  return buf;
}

}  // namespace shardema
