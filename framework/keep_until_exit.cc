#include "framework/keep_until_exit.h"

#include <mutex>
#include <utility>
#include <vector>

namespace shardema {
namespace {

struct Kept {
  std::mutex mu;
  std::vector<std::shared_ptr<void>> objects;
};

Kept& GetKept() {
  static Kept* kept = new Kept;  // never destroyed: what it holds outlives every static
  return *kept;
}

}  // namespace

void KeepUntilExit(std::shared_ptr<void> p) {
  if (p == nullptr) return;
  Kept& k = GetKept();
  std::lock_guard<std::mutex> lock(k.mu);
  k.objects.push_back(std::move(p));
}

size_t KeptUntilExitCount() {
  Kept& k = GetKept();
  std::lock_guard<std::mutex> lock(k.mu);
  return k.objects.size();
}

}  // namespace shardema
