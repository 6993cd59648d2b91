// The fiber scheduler behind framework/cuda_emu/emulator.h (contract there).
//
// A block's threads are fibers on stacks of kStackBytes (a guard page below each), run round robin
// by the launching thread. The switch between fibers is a few instructions of x86-64 assembly
// (shardema_emu_switch below) rather than swapcontext, which makes a system call per switch and
// which AddressSanitizer intercepts to clear the whole new stack's shadow each time: much too slow
// for the flash kernels' per-coefficient shuffles. Barriers
// are generation counters: a fiber arriving at one records itself and yields until the generation
// moves on. A whole round in which no fiber arrives anywhere, passes a barrier or exits is a
// deadlock, reported with each waiting thread. Warp exchanges keep two slot arrays, chosen by the
// generation's parity: a lane may start the next exchange before a slower lane has read this one,
// but not the one after (that needs the slower lane to arrive).
//
// Order: a GPU promises no order between the threads of a block between two barriers, nor between
// the blocks of a grid, so the emulation does not run them in index order (which would hide a read
// of a lower thread's or an earlier block's write made without a barrier: it would always see the
// new value). Each launch draws a permutation of its blocks (an affine map of the linear block
// index) and each block one of its threads (Fisher-Yates), from framework/rng.h's SeededRng keyed
// by the launch's kernel and shape (and the block), so a launch runs in the same order every time
// and a failure repeats; the block's rounds walk the thread permutation forwards and backwards in
// turn.
#include "framework/cuda_emu/emulator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "framework/rng.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SHARDEMA_EMU_ASAN 1
#else
#define SHARDEMA_EMU_ASAN 0
#endif

#if !defined(__x86_64__)
#error "framework/cuda_emu's fiber switch is written for x86-64"
#endif

// shardema_emu_switch(save, next): pushes the callee-saved registers and the SSE/x87 control
// words on the current stack, stores the stack pointer in *save, loads `next` and pops the same
// frame from it. A new fiber's stack holds such a frame whose return address is FiberMain.
extern "C" void shardema_emu_switch(void** save, void* next);
asm(R"(
  .text
  .globl shardema_emu_switch
  .type shardema_emu_switch, @function
shardema_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size shardema_emu_switch, .-shardema_emu_switch
)");

namespace shardema::cuda_emu::detail {
namespace {

constexpr size_t kStackBytes = 128 * 1024;
constexpr size_t kGuardBytes = 4096;
constexpr unsigned kMaxThreads = 1024;

enum class Wait { kNone, kBlock, kWarp };

struct Fiber {
  void* sp = nullptr;  // saved stack pointer while switched out
  ThreadState state;
  unsigned linear = 0;
  bool done = false;
  Wait wait = Wait::kNone;
  char* stack = nullptr;
  void* fake_stack = nullptr;  // AddressSanitizer's record of the fiber's fake stack
};

struct Warp {
  unsigned existing = 0, exited = 0;  // lane masks
  bool pending = false;
  unsigned mask = 0, arrived = 0;
  uint64_t gen = 0;
  unsigned took_part[2] = {0, 0};
  uint64_t slots[2][kWarpSize] = {};
};

struct Grid {
  const char* where = "";
  unsigned threads = 0, live = 0;
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  unsigned bar_arrived = 0;
  uint64_t bar_gen = 0;
  std::vector<char> dynamic_shared;
  const std::function<void()>* body = nullptr;
  Fiber* current = nullptr;
  bool progress = false;
  void* scheduler_sp = nullptr;
  const void* sched_bottom = nullptr;
  size_t sched_size = 0;
  void* sched_fake_stack = nullptr;
  std::string key;              // the launch's kernel and shape: its orders (top of this file)
  std::vector<unsigned> order;  // the running block's thread permutation
};

// A draw in [0, bound) (bound > 0) for the launch's permutations.
uint64_t Below(SeededRng& rng, uint64_t bound) { return rng.Next() % bound; }

std::mutex launch_mu;
Grid* grid = nullptr;  // the running launch (under launch_mu)
// The fiber stacks, and cudaFuncSetAttribute's limits (under launch_mu). Never destroyed (as
// runtime.cc's registries): a stream's worker may still launch while the process exits.
struct Launches {
  std::vector<char*> stacks;
  std::map<const void*, size_t> max_dynamic_shared;
  std::set<std::pair<char*, char*>> static_shared;  // RegisterShared's ranges
};
Launches& AllLaunches() {
  static Launches* l = new Launches;
  return *l;
}
thread_local cudaError_t last_error = cudaSuccess;

[[noreturn]] void Fatal(const std::string& what) {
  const Fiber* f = grid != nullptr ? grid->current : nullptr;
  std::string who;
  if (f != nullptr) {
    const ThreadState& s = f->state;
    who = " in block (" + std::to_string(s.block_idx.x) + "," + std::to_string(s.block_idx.y) +
          "," + std::to_string(s.block_idx.z) + ") thread (" + std::to_string(s.thread_idx.x) +
          "," + std::to_string(s.thread_idx.y) + "," + std::to_string(s.thread_idx.z) + ")";
  }
  std::fprintf(stderr, "cuda_emu: %s: %s%s\n", grid != nullptr ? grid->where : "", what.c_str(),
               who.c_str());
  std::fflush(stderr);
  std::abort();
}

// Sets [begin, end) to 0xff bytes, AddressSanitizer's redzones between the variables included
// (their shadow, not their bytes, is what it checks).
__attribute__((no_sanitize("address"))) void FillUnchecked(char* begin, char* end) {
  for (volatile char* p = begin; p < end; ++p) *p = char(0xff);
}

char* StackFor(size_t i) {
  std::vector<char*>& stacks = AllLaunches().stacks;
  while (stacks.size() <= i) {
    void* p = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) Fatal("cannot map a fiber stack");
    if (mprotect(p, kGuardBytes, PROT_NONE) != 0) Fatal("cannot protect a stack guard page");
    stacks.push_back(static_cast<char*>(p) + kGuardBytes);
  }
  return stacks[i];
}

void ToFiber(Fiber& f) {
  grid->current = &f;
#if SHARDEMA_EMU_ASAN
  __sanitizer_start_switch_fiber(&grid->sched_fake_stack, f.stack, kStackBytes);
#endif
  shardema_emu_switch(&grid->scheduler_sp, f.sp);
#if SHARDEMA_EMU_ASAN
  __sanitizer_finish_switch_fiber(grid->sched_fake_stack, nullptr, nullptr);
#endif
  grid->current = nullptr;
}

void ToScheduler(bool exiting) {
  Fiber& f = *grid->current;
#if SHARDEMA_EMU_ASAN
  __sanitizer_start_switch_fiber(exiting ? nullptr : &f.fake_stack, grid->sched_bottom,
                                 grid->sched_size);
#else
  (void)exiting;
#endif
  shardema_emu_switch(&f.sp, grid->scheduler_sp);
#if SHARDEMA_EMU_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &grid->sched_bottom, &grid->sched_size);
#endif
}

void TryCompleteWarp(Warp& w) {
  if (!w.pending) return;
  const unsigned need = w.mask & w.existing & ~w.exited;
  if ((w.arrived & need) != need) return;
  w.took_part[w.gen & 1] = w.arrived;
  w.arrived = 0;
  w.pending = false;
  ++w.gen;
  grid->progress = true;
}

void FiberMain() {
#if SHARDEMA_EMU_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &grid->sched_bottom, &grid->sched_size);
#endif
  (*grid->body)();
  Fiber& f = *grid->current;
  f.done = true;
  --grid->live;
  grid->progress = true;
  Warp& w = grid->warps[f.linear / kWarpSize];
  w.exited |= 1u << (f.linear % kWarpSize);
  TryCompleteWarp(w);
  ToScheduler(/*exiting=*/true);
  Fatal("a finished thread was resumed");
}

[[noreturn]] void Deadlock() {
  unsigned at_block = 0, at_warp = 0;
  std::string first;
  for (const Fiber& f : grid->fibers) {
    if (f.done) continue;
    (f.wait == Wait::kBlock ? at_block : at_warp) += 1;
    if (first.empty()) {
      first = "; the first waiting is thread (" + std::to_string(f.state.thread_idx.x) + "," +
              std::to_string(f.state.thread_idx.y) + "," + std::to_string(f.state.thread_idx.z) +
              ") at " + (f.wait == Wait::kBlock ? "__syncthreads" : "a warp shuffle or sync");
    }
  }
  grid->current = nullptr;
  Fatal("deadlock: " + std::to_string(at_block) + " thread(s) wait at __syncthreads, " +
        std::to_string(at_warp) + " at warp shuffles or __syncwarp, " +
        std::to_string(grid->threads - grid->live) + " of " + std::to_string(grid->threads) +
        " exited (every thread of a block must reach each __syncthreads; every live lane named "
        "in a shuffle's mask must reach it)" +
        first);
}

void RunBlock(uint64_t linear_block, dim3 grid_dim, dim3 block_dim) {
  const uint3 block_idx{unsigned(linear_block % grid_dim.x),
                        unsigned(linear_block / grid_dim.x % grid_dim.y),
                        unsigned(linear_block / (uint64_t(grid_dim.x) * grid_dim.y))};
  Grid& g = *grid;
  uint32_t mxcsr = 0;
  uint16_t fpcw = 0;
  asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fpcw));
  g.live = g.threads;
  g.bar_arrived = 0;
  for (Warp& w : g.warps) w = Warp{};
  for (unsigned i = 0; i < g.threads; ++i) {
    Fiber& f = g.fibers[i];
    f = Fiber{};
    f.linear = i;
    f.state.thread_idx = {i % block_dim.x, i / block_dim.x % block_dim.y,
                          i / (block_dim.x * block_dim.y)};
    f.state.block_idx = block_idx;
    f.state.block_dim = block_dim;
    f.state.grid_dim = grid_dim;
    f.stack = StackFor(i);
    g.warps[i / kWarpSize].existing |= 1u << (i % kWarpSize);
#if SHARDEMA_EMU_ASAN
    // Frames of the stack's previous fiber (it never returned) leave poisoned shadow behind.
    __asan_unpoison_memory_region(f.stack, kStackBytes);
#endif
    // The frame shardema_emu_switch pops: control words, six registers, then FiberMain as the
    // return address at a 16-byte boundary (so FiberMain starts as if called).
    auto* top = reinterpret_cast<uint64_t*>(f.stack + kStackBytes) - 2;
    top[0] = reinterpret_cast<uint64_t>(&FiberMain);
    top[1] = 0;
    uint64_t* frame = top - 7;
    for (int k = 1; k < 7; ++k) frame[k] = 0;
    frame[0] = uint64_t(mxcsr) | (uint64_t(fpcw) << 32);
    f.sp = frame;
  }
  // Uninitialised shared memory, dynamic and static, reads as NaN (0xff bytes), as a test would
  // notice (not the previous block's values).
  std::fill(g.dynamic_shared.begin(), g.dynamic_shared.end(), char(0xff));
  for (const auto& [begin, end] : AllLaunches().static_shared) FillUnchecked(begin, end);
  SeededRng rng(linear_block, g.key);
  std::iota(g.order.begin(), g.order.end(), 0u);
  for (unsigned i = g.threads; i > 1; --i) std::swap(g.order[i - 1], g.order[Below(rng, i)]);
  for (bool forward = true; g.live > 0; forward = !forward) {
    g.progress = false;
    for (unsigned k = 0; k < g.threads; ++k) {
      Fiber& f = g.fibers[g.order[forward ? k : g.threads - 1 - k]];
      if (!f.done) ToFiber(f);
    }
    if (!g.progress && g.live > 0) Deadlock();
  }
}

}  // namespace

const ThreadState& Self() {
  if (grid == nullptr || grid->current == nullptr) {
    std::fprintf(stderr, "cuda_emu: threadIdx/blockIdx read outside a kernel\n");
    std::abort();
  }
  return grid->current->state;
}

unsigned LaneId() { return grid->current->linear % kWarpSize; }

char* DynamicShared() { return grid->dynamic_shared.data(); }

bool RegisterShared(char* begin, char* end) {
  if (begin == nullptr || end <= begin) return true;
  std::lock_guard<std::mutex> lock(launch_mu);
  AllLaunches().static_shared.insert({begin, end});
  return true;
}

void SyncThreads() {
  Grid& g = *grid;
  Fiber& f = *g.current;
  const uint64_t gen = g.bar_gen;
  g.progress = true;
  if (++g.bar_arrived == g.threads) {
    g.bar_arrived = 0;
    ++g.bar_gen;
    return;
  }
  f.wait = Wait::kBlock;
  while (g.bar_gen == gen) ToScheduler(false);
  f.wait = Wait::kNone;
}

uint64_t WarpExchange(unsigned mask, uint64_t bits, unsigned src) {
  Grid& g = *grid;
  Fiber& f = *g.current;
  const unsigned lane = f.linear % kWarpSize;
  Warp& w = g.warps[f.linear / kWarpSize];
  if (((mask >> lane) & 1u) == 0)
    Fatal("a warp shuffle or sync whose mask lacks the caller's lane");
  if (w.pending && w.mask != mask) {
    Fatal("lanes of one warp shuffle or sync with different masks at once (not emulated)");
  }
  w.pending = true;
  w.mask = mask;
  const uint64_t gen = w.gen;
  w.slots[gen & 1][lane] = bits;
  w.arrived |= 1u << lane;
  g.progress = true;
  TryCompleteWarp(w);
  f.wait = Wait::kWarp;
  while (w.gen == gen) ToScheduler(false);
  f.wait = Wait::kNone;
  if (src >= kWarpSize || ((w.took_part[gen & 1] >> src) & 1u) == 0) {
    Fatal("a warp shuffle reads lane " + std::to_string(src) + ", which did not take part");
  }
  return w.slots[gen & 1][src];
}

void SyncWarp(unsigned mask) { WarpExchange(mask, 0, LaneId()); }

cudaError_t SetMaxDynamicShared(const void* kernel, int bytes) {
  if (bytes < 0 || size_t(bytes) > kMaxDynamicShared) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lock(launch_mu);
  AllLaunches().max_dynamic_shared[kernel] = size_t(bytes);
  return cudaSuccess;
}

cudaError_t& LastError() { return last_error; }

cudaError_t CheckLaunch(const void* kernel, dim3 grid_dim, dim3 block_dim, size_t smem) {
  const uint64_t threads = uint64_t(block_dim.x) * block_dim.y * block_dim.z;
  if (threads == 0 || threads > kMaxThreads || block_dim.z > 64 || grid_dim.x == 0 ||
      grid_dim.y == 0 || grid_dim.z == 0 || grid_dim.y > 65535 || grid_dim.z > 65535 ||
      grid_dim.x > 0x7fffffffu) {
    return cudaErrorInvalidConfiguration;
  }
  std::lock_guard<std::mutex> lock(launch_mu);
  const std::map<const void*, size_t>& limits = AllLaunches().max_dynamic_shared;
  const auto attr = limits.find(kernel);
  const size_t smem_limit =
      std::max(kDefaultDynamicShared, attr == limits.end() ? 0 : attr->second);
  return smem > smem_limit ? cudaErrorInvalidValue : cudaSuccess;
}

void RunGrid(const char* where, dim3 grid_dim, dim3 block_dim, size_t smem,
             const std::function<void()>& body) {
  const uint64_t threads = uint64_t(block_dim.x) * block_dim.y * block_dim.z;
  std::lock_guard<std::mutex> lock(launch_mu);
  Grid g;
  g.where = where;
  g.threads = unsigned(threads);
  g.fibers.resize(threads);
  g.warps.resize((threads + kWarpSize - 1) / kWarpSize);
  g.dynamic_shared.resize(std::max<size_t>(smem, 16));
  g.order.resize(threads);
  g.body = &body;
  // The launch's order (top of this file): blocks b -> (a * b + c) mod n with a coprime to n.
  const uint64_t n = uint64_t(grid_dim.x) * grid_dim.y * grid_dim.z;
  g.key = std::string(where);
  for (unsigned v : {grid_dim.x, grid_dim.y, grid_dim.z, block_dim.x, block_dim.y, block_dim.z}) {
    g.key += " " + std::to_string(v);
  }
  SeededRng rng(/*seed=*/~0ull, g.key);  // block b's thread order: seed b (RunBlock)
  uint64_t a = n > 1 ? 1 + Below(rng, n - 1) : 1;
  while (std::gcd(a, n) != 1) ++a;
  const uint64_t c = Below(rng, n);
  grid = &g;
  for (uint64_t b = 0; b < n; ++b) {
    const auto ab = static_cast<unsigned __int128>(a) * b;  // n may exceed 2^32
    RunBlock(uint64_t((ab + c) % n), grid_dim, block_dim);
  }
  grid = nullptr;
}

}  // namespace shardema::cuda_emu::detail
