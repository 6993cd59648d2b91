// gemm_backend_bench: the layer kit's GEMMs through Eigen, as nn/linear.h runs them, against
// cblas_sgemm of Debian's OpenBLAS and BLIS, on the shapes of the two example models (issue 35
// item 5: is a per-variant BLAS backend worth it?).
//
//   taskset -c 1 bazel-bin/bench/gemm_backend_bench [--variants native,v2,v3,v4] [--repeats 11]
//       [--sample-ms 3] [--openblas PATH] [--blis PATH] [--out FILE]
//       [--gpt-roofline bazel-bin/examples/gpt_roofline]
//       [--mlp-roofline bazel-bin/bench/step_roofline]
//
// Shapes (rows per rank, f32, row-major, nn/linear.h's layouts): for each Linear of
//   mlp     train_mlp --layers 256,1024,768,256,16 --batch 48 (the README's job) at 1 rank (48
//           rows) and 4 ranks (12 rows);
//   gpt     train_gpt's default model, the 834k GPT of bench/gpt_step_bench (4 layers, C 128,
//           T 64, vocab 256; that bench's batch 16: c_attn C->3C, attn c_proj C->C, c_fc C->4C,
//           mlp c_proj 4C->C, the tied lm_head C->V) at 1 rank (1024 rows) and 4 (256 rows);
//   gpt10m  the 10.8M GPT of the same bench (6 layers, C 384) at 1 rank (1024 rows);
// the three products of a Linear (x [rows, in], W [out, in], dy [rows, out]):
//   fwd  y = x W^T    cblas_sgemm(RowMajor, NoTrans, Trans,   rows, out, in)
//   dw   dW = dy^T x  cblas_sgemm(RowMajor, Trans,   NoTrans, out,  in,  rows)
//   dx   dx = dy W    cblas_sgemm(RowMajor, NoTrans, NoTrans, rows, in,  out)
// (mlp's first layer has no dx: the batch needs no gradient). Eigen runs through the layer kit's
// own entry points (nn::LinearForward, nn::LinearBackward with only dW or only dx requested; no
// bias, db or residual: those element passes are the same whichever backend multiplies), under
// SetCpuIsa, so panels and skinny kernels are the ones training takes.
// Variants, each in a child process (a BLAS picks its kernels once, when it is loaded):
//   native  Eigen: BestCpuIsa(); OpenBLAS and BLIS: their own CPU detection;
//   v2/v3/v4  Eigen isa_v2/v3/v4; OPENBLAS_CORETYPE and BLIS_ARCH_TYPE force the library's kernel
//           set of the same ISA level (v2 NEHALEM/penryn, v3 ZEN/zen3, v4 SKYLAKEX/skx), i.e.
//           what each variant's code does on THIS CPU (not on another CPU of that level).
// The libraries are dlopen'ed (RTLD_LOCAL) at run time, not linked: both export cblas_sgemm, so
// one binary linking both would bind every call to one of them, and the build needs neither (a
// missing library is reported as absent). One thread: CpuContext(1), OPENBLAS_NUM_THREADS =
// BLIS_NUM_THREADS = 1 (train_mlp/train_gpt run --compute-threads 1 per rank by default); use
// the serial builds (default paths) and pin the process to one core (taskset).
// Timing: a sample is enough back-to-back calls of one product on the same operands to last
// --sample-ms (calibrated once per case on Eigen); --repeats rounds, each over every case and,
// within a case, the three backends in a rotating order (interleaved); per backend the median
// sample per call. GFLOP/s = 2 M N K / time. Each backend's result is checked against Eigen's
// (max |difference| / max |Eigen|, in the JSON).
// Per model: the GEMM time of one step = sum over its Linears of (fwd + dw + dx) x the Linear's
// count; vs_eigen = Eigen's time / the backend's (> 1: the backend is faster); best_per_op: the
// fastest backend for each product (the bound of a dispatch per shape rather than per model).
// Step share (with the roofline binaries; mpirun -np 1): each model's compute part at 1 rank
// (forward + backward through nn/, the native variant; examples/gpt_roofline, bench/step_roofline)
// and the native Eigen GEMMs' share of it, and that compute with a library's GEMMs instead.
// Output: a table per variant, a JSON file (default bench/results/gemm_backend_<UTC date>.json
// under $BUILD_WORKSPACE_DIRECTORY or the working directory) with the machine, commit, command,
// library versions and every figure, and a last line
//   summary: <model>_<lib>_vs_eigen=<native step-GEMM ratio at 1 rank> <model>_w4_<lib>_vs_eigen=
//   (4 ranks) best_native_<model>=<fastest backend>, the same per forced variant at 1 rank
//   (<variant>_<model>_<lib>_vs_eigen, best_<variant>_<model>), <model>_gemm_share=...
#include <dlfcn.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "framework/cpu_features.h"
#include "framework/cpu_isa.h"
#include "framework/status.h"
#include "nn/cpu_context.h"
#include "nn/linear.h"

extern char** environ;

namespace shardema {
namespace {

using json = nlohmann::json;

constexpr const char* kBench = "gemm_backend_bench";
constexpr const char* kDefaultOpenblas =
    "/usr/lib/x86_64-linux-gnu/openblas-serial/libopenblas.so.0";
constexpr const char* kDefaultBlis = "/usr/lib/x86_64-linux-gnu/blis-serial/libblis.so.4";

// ---- Shapes ----
struct LinearShape {
  std::string name;
  int64_t in, out;
  int count;     // Linears of this shape per step
  bool need_dx;  // whether the step computes dx
};
struct Model {
  std::string name;
  std::vector<int> worlds;
  int64_t global_rows;  // rows per step over all ranks
  std::vector<LinearShape> linears;
};

std::vector<Model> Models() {
  std::vector<Model> m;
  {
    Model mlp{"mlp", {1, 4}, 48, {}};
    const std::vector<int64_t> layers = {256, 1024, 768, 256, 16};
    for (size_t i = 0; i + 1 < layers.size(); ++i) {
      mlp.linears.push_back(
          {"layers." + std::to_string(i), layers[i], layers[i + 1], 1, /*need_dx=*/i > 0});
    }
    m.push_back(mlp);
  }
  auto gpt = [](const std::string& name, std::vector<int> worlds, int64_t layers, int64_t c) {
    const int n = int(layers);
    return Model{name,
                 std::move(worlds),
                 16 * 64,
                 {{"c_attn", c, 3 * c, n, true},
                  {"attn.c_proj", c, c, n, true},
                  {"c_fc", c, 4 * c, n, true},
                  {"mlp.c_proj", 4 * c, c, n, true},
                  {"lm_head", c, 256, 1, true}}};
  };
  m.push_back(gpt("gpt", {1, 4}, 4, 128));
  m.push_back(gpt("gpt10m", {1}, 6, 384));
  return m;
}

enum class Kind { kFwd, kDw, kDx };
const char* KindName(Kind k) { return k == Kind::kFwd ? "fwd" : k == Kind::kDw ? "dw" : "dx"; }

struct Case {
  const Model* model;
  int world;
  int64_t rows;
  const LinearShape* linear;
  Kind kind;
  // The GEMM as C[M, N] = op(A)[M, K] op(B)[K, N].
  int64_t M() const { return kind == Kind::kFwd ? rows : kind == Kind::kDw ? linear->out : rows; }
  int64_t N() const { return kind == Kind::kFwd ? linear->out : linear->in; }
  int64_t K() const {
    return kind == Kind::kFwd ? linear->in : kind == Kind::kDw ? rows : linear->out;
  }
  double Flops() const { return 2.0 * double(M()) * double(N()) * double(K()); }
};

// ---- The BLAS libraries, dlopen'ed ----
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // CBLAS enum values
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);

struct Blas {
  std::string name, path;
  void* handle = nullptr;
  SgemmFn sgemm = nullptr;
  json info;  // version, kernels, or why absent
};

template <typename F>
F Sym(void* h, const char* name) {
  return reinterpret_cast<F>(dlsym(h, name));
}

// blis_arch: a BLIS configuration to force ("" = BLIS's own choice).
Blas LoadBlas(const std::string& name, const std::string& path, const std::string& blis_arch) {
  Blas b{name, path};
  b.info["path"] = path;
  b.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (b.handle == nullptr) {
    const char* e = dlerror();
    b.info["absent"] = e != nullptr ? e : "dlopen failed";
    return b;
  }
  b.sgemm = Sym<SgemmFn>(b.handle, "cblas_sgemm");
  if (b.sgemm == nullptr) {
    b.info["absent"] = "no cblas_sgemm in " + path;
    return b;
  }
  if (name == "openblas") {
    if (auto f = Sym<char* (*)()>(b.handle, "openblas_get_config")) b.info["config"] = f();
    if (auto f = Sym<char* (*)()>(b.handle, "openblas_get_corename")) b.info["kernels"] = f();
    if (auto f = Sym<int (*)()>(b.handle, "openblas_get_num_threads")) b.info["threads"] = f();
  } else {
    auto query = Sym<int (*)()>(b.handle, "bli_arch_query_id");
    auto str = Sym<const char* (*)(int)>(b.handle, "bli_arch_string");
    if (!blis_arch.empty() && str != nullptr) {
      // BLIS 0.9 reads BLIS_ARCH_TYPE as a number (an arch_t; a name reads as 0, skx) when it
      // initialises: the number of the named configuration, from BLIS's own table.
      for (int id = 0; id < 64; ++id) {
        const char* s = str(id);
        if (s == nullptr) break;
        if (blis_arch == s) setenv("BLIS_ARCH_TYPE", std::to_string(id).c_str(), 1);
      }
    }
    // Initialised before the architecture is queried: BLIS 0.9 looks BLIS_ARCH_TYPE up among
    // the contexts that bli_init registers (querying first aborts).
    if (auto f = Sym<void (*)()>(b.handle, "bli_init")) f();
    if (auto f = Sym<const char* (*)()>(b.handle, "bli_info_get_version_str")) {
      b.info["version"] = f();
    }
    if (query != nullptr && str != nullptr) b.info["kernels"] = str(query());
    if (auto f = Sym<long (*)()>(b.handle, "bli_thread_get_num_threads")) b.info["threads"] = f();
  }
  return b;
}

// Gemm through cblas_sgemm in the layer kit's layouts (see the header).
void BlasGemm(SgemmFn sgemm, const Case& c, const float* x, const float* w, const float* dy,
              float* out) {
  const int rows = int(c.rows), in = int(c.linear->in), o = int(c.linear->out);
  switch (c.kind) {
    case Kind::kFwd:
      sgemm(kRowMajor, kNoTrans, kTrans, rows, o, in, 1.f, x, in, w, in, 0.f, out, o);
      break;
    case Kind::kDw:
      sgemm(kRowMajor, kTrans, kNoTrans, o, in, rows, 1.f, dy, o, x, in, 0.f, out, in);
      break;
    case Kind::kDx:
      sgemm(kRowMajor, kNoTrans, kNoTrans, rows, in, o, 1.f, dy, o, w, in, 0.f, out, in);
      break;
  }
}

void EigenGemm(const nn::CpuContext& ctx, const Case& c, const float* x, const float* w,
               const float* dy, float* out) {
  const int64_t rows = c.rows, in = c.linear->in, o = c.linear->out;
  switch (c.kind) {
    case Kind::kFwd: nn::LinearForward(ctx, x, w, nullptr, rows, in, o, out); break;
    case Kind::kDw:
      nn::LinearBackward(ctx, x, nullptr, dy, rows, in, o, out, nullptr, nullptr, false);
      break;
    case Kind::kDx:
      nn::LinearBackward(ctx, nullptr, w, dy, rows, in, o, nullptr, nullptr, out, false);
      break;
  }
}

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double CpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

std::string Slurp(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
    pclose(p);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

// The kernel set each forced variant asks of the libraries (see the header).
struct VariantEnv {
  const char* openblas_coretype;
  const char* blis_arch;
};
std::map<std::string, VariantEnv> VariantEnvs() {
  return {{"v2", {"NEHALEM", "penryn"}}, {"v3", {"ZEN", "zen3"}}, {"v4", {"SKYLAKEX", "skx"}}};
}

// ---- One variant, in this process: its JSON part ----
StatusOr<json> MeasureVariant(const std::string& variant, int repeats, double sample_ms,
                              const std::string& openblas_path, const std::string& blis_path) {
  json part;
  part["variant"] = variant;
  CpuIsa isa = BestCpuIsa();
  std::string blis_arch;
  const auto envs = VariantEnvs();
  if (variant != "native") {
    auto it = envs.find(variant);
    if (it == envs.end()) return InvalidArgument("unknown variant '", variant, "'");
    ASSIGN_OR_RETURN(isa, ParseCpuIsa(variant));
    setenv("OPENBLAS_CORETYPE", it->second.openblas_coretype, 1);
    blis_arch = it->second.blis_arch;
  }
  setenv("OPENBLAS_NUM_THREADS", "1", 1);
  setenv("BLIS_NUM_THREADS", "1", 1);
  RETURN_IF_ERROR(SetCpuIsa(isa));
  part["eigen_isa"] = CpuIsaName(isa);
  std::vector<Blas> libs = {LoadBlas("openblas", openblas_path, ""),
                            LoadBlas("blis", blis_path, blis_arch)};
  for (const Blas& b : libs) part["libraries"][b.name] = b.info;

  const std::vector<Model> models = Models();
  std::vector<Case> cases;
  for (const Model& m : models) {
    for (int w : m.worlds) {
      for (const LinearShape& l : m.linears) {
        for (Kind k : {Kind::kFwd, Kind::kDw, Kind::kDx}) {
          if (k == Kind::kDx && !l.need_dx) continue;
          cases.push_back({&m, w, m.global_rows / w, &l, k});
        }
      }
    }
  }
  // Backends: 0 = Eigen, then each library present.
  std::vector<std::string> names = {"eigen"};
  std::vector<SgemmFn> fns = {nullptr};
  for (const Blas& b : libs) {
    if (b.sgemm != nullptr) {
      names.push_back(b.name);
      fns.push_back(b.sgemm);
    }
  }
  const size_t nb = names.size();
  const nn::CpuContext ctx(1);
  std::mt19937 rng(35);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  struct Data {
    std::vector<float> x, w, dy;
    std::vector<std::vector<float>> out;
    int iters = 1;
    std::vector<std::vector<double>> ms;  // per backend, per call
  };
  std::vector<Data> data(cases.size());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    Data& d = data[i];
    auto fill = [&](std::vector<float>* v, int64_t n) {
      v->resize(size_t(n));
      for (float& f : *v) f = dist(rng);
    };
    fill(&d.x, c.rows * c.linear->in);
    fill(&d.w, c.linear->out * c.linear->in);
    fill(&d.dy, c.rows * c.linear->out);
    d.out.assign(nb, std::vector<float>(size_t(c.M() * c.N()), 0.f));
    d.ms.resize(nb);
  }
  auto call = [&](size_t i, size_t b) {
    const Case& c = cases[i];
    Data& d = data[i];
    if (b == 0) {
      EigenGemm(ctx, c, d.x.data(), d.w.data(), d.dy.data(), d.out[b].data());
    } else {
      BlasGemm(fns[b], c, d.x.data(), d.w.data(), d.dy.data(), d.out[b].data());
    }
  };
  // Calibration (Eigen) and a warm-up call of every backend; then the results are compared.
  for (size_t i = 0; i < cases.size(); ++i) {
    for (size_t b = 0; b < nb; ++b) call(i, b);
    const double t0 = NowMs();
    int n = 0;
    do {
      call(i, 0);
      ++n;
    } while (NowMs() - t0 < sample_ms / 4);
    const double per = (NowMs() - t0) / n;
    data[i].iters = std::max(1, int(std::lround(sample_ms / std::max(per, 1e-6))));
  }
  std::vector<std::vector<double>> rel_err(cases.size(), std::vector<double>(nb, 0.0));
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::vector<float>& ref = data[i].out[0];
    double scale = 0;
    for (float v : ref) scale = std::max(scale, double(std::fabs(v)));
    for (size_t b = 1; b < nb; ++b) {
      double e = 0;
      for (size_t k = 0; k < ref.size(); ++k) {
        e = std::max(e, double(std::fabs(ref[k] - data[i].out[b][k])));
      }
      rel_err[i][b] = scale > 0 ? e / scale : e;
    }
  }
  const double t_start = NowMs(), cpu_start = CpuMs();
  for (int r = 0; r < repeats; ++r) {
    for (size_t i = 0; i < cases.size(); ++i) {
      for (size_t j = 0; j < nb; ++j) {
        const size_t b = (j + size_t(r) + i) % nb;  // rotating order
        const int n = data[i].iters;
        const double t0 = NowMs();
        for (int k = 0; k < n; ++k) call(i, b);
        data[i].ms[b].push_back((NowMs() - t0) / n);
      }
    }
  }
  part["measure_s"] = (NowMs() - t_start) / 1000;
  // Below 1: the process waited for its core part of the time (another process ran there).
  part["cpu_over_wall"] = (CpuMs() - cpu_start) / (NowMs() - t_start);

  std::printf("# variant %s: eigen %s, openblas %s, blis %s; cpu/wall %.3f\n", variant.c_str(),
              CpuIsaName(isa),
              libs[0].info.value("kernels", libs[0].info.value("absent", "?")).c_str(),
              libs[1].info.value("kernels", libs[1].info.value("absent", "?")).c_str(),
              part["cpu_over_wall"].get<double>());
  std::printf("%-7s %2s %5s %-12s %-3s %5s %5s %5s", "model", "W", "rows", "linear", "op", "M", "N",
              "K");
  for (size_t b = 0; b < nb; ++b) std::printf(" %10s", (names[b] + "_us").c_str());
  for (size_t b = 0; b < nb; ++b) std::printf(" %8s", (names[b] + "_gf").c_str());
  for (size_t b = 1; b < nb; ++b) std::printf(" %8s", (names[b] + "/e").c_str());
  std::printf("\n");
  json shapes = json::array();
  // Per (model, world): step GEMM ms per backend.
  std::map<std::string, std::vector<double>> step_ms;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    std::vector<double> med(nb);
    for (size_t b = 0; b < nb; ++b) med[b] = bench::Median(data[i].ms[b]);
    std::printf("%-7s %2d %5lld %-12s %-3s %5lld %5lld %5lld", c.model->name.c_str(), c.world,
                (long long)c.rows, c.linear->name.c_str(), KindName(c.kind), (long long)c.M(),
                (long long)c.N(), (long long)c.K());
    for (size_t b = 0; b < nb; ++b) std::printf(" %10.2f", med[b] * 1000);
    for (size_t b = 0; b < nb; ++b) std::printf(" %8.1f", c.Flops() / (med[b] * 1e6));
    for (size_t b = 1; b < nb; ++b) std::printf(" %8.3f", med[0] / med[b]);
    std::printf("\n");
    json s;
    s["model"] = c.model->name;
    s["world"] = c.world;
    s["rows"] = c.rows;
    s["linear"] = c.linear->name;
    s["count_per_step"] = c.linear->count;
    s["op"] = KindName(c.kind);
    s["M"] = c.M();
    s["N"] = c.N();
    s["K"] = c.K();
    s["iters_per_sample"] = data[i].iters;
    for (size_t b = 0; b < nb; ++b) {
      json& e = s["backends"][names[b]];
      e["median_us"] = med[b] * 1000;
      e["min_us"] = *std::min_element(data[i].ms[b].begin(), data[i].ms[b].end()) * 1000;
      e["gflops"] = c.Flops() / (med[b] * 1e6);
      if (b > 0) {
        e["vs_eigen"] = med[0] / med[b];
        e["max_rel_diff"] = rel_err[i][b];
      }
    }
    shapes.push_back(s);
    std::vector<double>& t = step_ms[c.model->name + "_w" + std::to_string(c.world)];
    t.resize(nb + 1, 0.0);  // the backends, then the fastest of them for each product
    for (size_t b = 0; b < nb; ++b) t[b] += med[b] * c.linear->count;
    t[nb] += *std::min_element(med.begin(), med.end()) * c.linear->count;
  }
  part["shapes"] = shapes;
  for (const auto& [key, t] : step_ms) {
    json& s = part["step_gemm"][key];
    std::printf("# step GEMMs %-10s", key.c_str());
    for (size_t b = 0; b < nb; ++b) {
      s[names[b] + "_ms"] = t[b];
      std::printf(" %s %.3f ms", names[b].c_str(), t[b]);
      if (b > 0) {
        s[names[b] + "_vs_eigen"] = t[0] / t[b];
        std::printf(" (x%.3f)", t[0] / t[b]);
      }
    }
    // A pick per product (shape and op) instead of per model: the bound of such a dispatch.
    s["best_per_op_ms"] = t[nb];
    s["best_per_op_vs_eigen"] = t[0] / t[nb];
    std::printf(" best-per-op %.3f ms (x%.3f)\n", t[nb], t[0] / t[nb]);
  }
  std::fflush(stdout);
  return part;
}

// ---- The parent: machine, children, merge ----
json Machine() {
  json m;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(cpuinfo, line)) {
    auto value = [&]() {
      const size_t p = line.find(':');
      return p == std::string::npos ? std::string() : line.substr(p + 2);
    };
    if (model.empty() && line.rfind("model name", 0) == 0) model = value();
    if (flags.empty() && line.rfind("flags", 0) == 0) flags = value();
  }
  m["model_name"] = model;
  m["amd_family"] = CpuAmdFamily();
  std::vector<std::string> have;
  for (const char* f : {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                        "avx512_bf16", "avx512_vnni", "amx_tile"}) {
    if ((" " + flags + " ").find(std::string(" ") + f + " ") != std::string::npos) {
      have.push_back(f);
    }
  }
  m["flags"] = have;
  m["x86_64_v3"] = CpuHasX86_64V3();
  m["x86_64_v4"] = CpuHasX86_64V4();
  m["cpu_isa_auto"] = CpuIsaName(BestCpuIsa());
  m["hardware_threads"] = int(std::thread::hardware_concurrency());
  m["cpus_allowed"] = CpusAllowed();
  return m;
}

std::string LoadAvg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// Runs this binary for one variant; its JSON part comes back through a file.
StatusOr<json> RunChild(const std::string& variant, const std::vector<std::string>& pass) {
  char tmpl[] = "/tmp/gemm_backend_bench_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return Internal("mkstemp failed");
  close(fd);
  std::vector<std::string> args = {"/proc/self/exe", "--one-variant", variant, "--part-out", tmpl};
  args.insert(args.end(), pass.begin(), pass.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid;
  if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ) != 0) {
    return Internal("posix_spawn failed");
  }
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return Internal("variant ", variant, ": child failed (status ", st, ")");
  }
  std::ifstream in(tmpl);
  json part = json::parse(in, nullptr, /*allow_exceptions=*/false);
  std::remove(tmpl);
  if (part.is_discarded()) return Internal("variant ", variant, ": unreadable part");
  return part;
}

// The compute part (forward + backward through nn/, the native variant, one rank, one thread) of
// each model's step from its roofline binary, and the native Eigen GEMMs' share of it:
// share = step GEMM ms / compute ms; with_<lib>_compute_ms = compute - Eigen's GEMMs + the
// library's (what the step's compute would take with that backend, if nothing else changed).
void StepShares(const std::string& gpt_roofline, const std::string& mlp_roofline, json* j) {
  const std::map<std::string, std::pair<std::string, std::string>> runs = {
      {"mlp", {mlp_roofline, "--layers 256,1024,768,256,16 --batch 48"}},
      {"gpt", {gpt_roofline, "--n-layer 4 --n-head 4 --n-embd 128 --block-size 64 --batch 16"}},
      {"gpt10m", {gpt_roofline, "--n-layer 6 --n-head 6 --n-embd 384 --block-size 64 --batch 16"}}};
  for (const auto& [model, run] : runs) {
    if (run.first.empty()) continue;
    const json& g = (*j)["variants"]["native"]["step_gemm"][model + "_w1"];
    if (g.is_null()) continue;
    const std::string cmd =
        "env -u SHARDEMA_CPU_ISA OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
        "mpirun -np 1 '" +
        run.first + "' " + run.second + " --threads 1 --repeats 10 2>/dev/null";
    const std::string outp = Slurp(cmd);
    const size_t at = outp.find("{\"world\"");
    json r = at == std::string::npos
                 ? json()
                 : json::parse(outp.substr(at, outp.find('\n', at) - at), nullptr, false);
    json& e = (*j)["step_share"][model + "_w1"];
    e["command"] = cmd;
    if (r.is_discarded() || !r.contains("compute_ms")) {
      e["error"] = "no roofline JSON line";
      continue;
    }
    const double compute = r["compute_ms"].get<double>(), eigen = g["eigen_ms"].get<double>();
    e["roofline"] = r;
    e["eigen_gemm_ms"] = eigen;
    e["gemm_share_of_compute"] = eigen / compute;
    for (const char* lib : {"openblas", "blis"}) {
      const std::string k = std::string(lib) + "_ms";
      if (!g.contains(k)) continue;
      const double with = compute - eigen + g[k].get<double>();
      e[std::string("with_") + lib + "_compute_ms"] = with;
      e[std::string("with_") + lib + "_compute_speedup"] = compute / with;
    }
    std::printf("# step share %s_w1: compute %.2f ms, Eigen GEMMs %.2f ms (%.2f)\n", model.c_str(),
                compute, eigen, eigen / compute);
  }
}

std::string Fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", v);
  return b;
}

int Run(int argc, char** argv) {
  std::string variants = "native,v2,v3,v4", openblas = kDefaultOpenblas, blis = kDefaultBlis;
  std::string out, one_variant, part_out, gpt_roofline, mlp_roofline;
  int repeats = 11;
  double sample_ms = 3;
  CLI::App app{kBench};
  app.add_option("--variants", variants, "comma-separated: native, v2, v3, v4");
  app.add_option("--repeats", repeats, "interleaved rounds (median)")->check(CLI::Range(1, 1000));
  app.add_option("--sample-ms", sample_ms, "length of one timed sample")
      ->check(CLI::Range(0.01, 1000.0));
  app.add_option("--openblas", openblas, "OpenBLAS shared library (serial build)");
  app.add_option("--blis", blis, "BLIS shared library (serial build)");
  app.add_option("--out", out, "JSON file (default bench/results/gemm_backend_<date>.json)");
  app.add_option("--gpt-roofline", gpt_roofline,
                 "examples/gpt_roofline binary: the step share of the GPTs' GEMMs");
  app.add_option("--mlp-roofline", mlp_roofline,
                 "bench/step_roofline binary: the step share of the MLP's GEMMs");
  app.add_option("--one-variant", one_variant)->group("");  // the child's
  app.add_option("--part-out", part_out)->group("");
  CLI11_PARSE(app, argc, argv);
  const std::vector<std::string> pass = {"--repeats",   std::to_string(repeats),
                                         "--sample-ms", std::to_string(sample_ms),
                                         "--openblas",  openblas,
                                         "--blis",      blis};
  if (!one_variant.empty()) {
    StatusOr<json> part = MeasureVariant(one_variant, repeats, sample_ms, openblas, blis);
    if (!part.ok()) return bench::ExitWith(kBench, part.status());
    std::ofstream(part_out) << part->dump();
    return 0;
  }

  json j;
  const std::time_t now = std::time(nullptr);
  char date[32], stamp[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  const std::string root = ws != nullptr ? std::string(ws) + "/" : "";
  if (out.empty()) out = root + "bench/results/gemm_backend_" + date + ".json";
  std::string command;
  for (int i = 0; i < argc; ++i) command += (i ? " " : "") + std::string(argv[i]);
  j["bench"] = kBench;
  j["date"] = stamp;
  j["command"] = command;
  j["commit"] =
      Slurp("git -C '" + (root.empty() ? std::string(".") : root) + "' rev-parse HEAD 2>/dev/null");
  // Uncommitted changes to what the figures depend on (the layer kit, this benchmark).
  j["dirty"] = !Slurp("git -C '" + (root.empty() ? std::string(".") : root) +
                      "' status --porcelain -- nn bench/gemm_backend_bench.cc 2>/dev/null")
                    .empty();
  j["machine"] = Machine();
  j["load_avg_start"] = LoadAvg();
  j["debian_packages"] = Slurp(
      "dpkg-query -W -f='${Package} ${Version}\\n' libopenblas0-serial libblis4-serial "
      "2>/dev/null");
  j["threads"] = 1;
  j["repeats"] = repeats;
  j["sample_ms"] = sample_ms;
  j["ratio"] = "vs_eigen = Eigen median time / backend median time (> 1: backend faster)";

  std::vector<std::string> list;
  std::stringstream ss(variants);
  for (std::string v; std::getline(ss, v, ',');) {
    if (!v.empty()) list.push_back(v);
  }
  std::string summary;
  for (const std::string& v : list) {
    if (v != "native") {
      StatusOr<CpuIsa> isa = ParseCpuIsa(v);
      if (!isa.ok()) {
        std::printf("# variant %s: skipped (%s)\n", v.c_str(), isa.status().message().c_str());
        j["variants"][v]["skipped"] = isa.status().message();
        continue;
      }
    }
    StatusOr<json> part = RunChild(v, pass);
    if (!part.ok()) return bench::ExitWith(kBench, part.status());
    j["variants"][v] = *part;
    for (const auto& [key, s] : (*part)["step_gemm"].items()) {
      const bool w1 = key.size() > 3 && key.substr(key.size() - 3) == "_w1";
      if (!w1 && v != "native") continue;
      const std::string model = w1 ? key.substr(0, key.size() - 3) : key;
      const std::string prefix = v == "native" ? "" : v + "_";
      std::string best = "eigen";
      double best_ms = s.value("eigen_ms", 0.0);
      for (const char* lib : {"openblas", "blis"}) {
        const std::string k = std::string(lib) + "_vs_eigen";
        if (!s.contains(k)) continue;
        summary += " " + prefix + model + "_" + lib + "_vs_eigen=" + Fmt(s[k].get<double>());
        if (s[std::string(lib) + "_ms"].get<double>() < best_ms) {
          best_ms = s[std::string(lib) + "_ms"].get<double>();
          best = lib;
        }
      }
      summary += " " + prefix + model +
                 "_best_per_op_vs_eigen=" + Fmt(s["best_per_op_vs_eigen"].get<double>());
      summary += " best_" + (v == "native" ? std::string("native") : v) + "_" + model + "=" + best;
    }
  }
  if (j.contains("variants") && j["variants"].contains("native")) {
    StepShares(gpt_roofline, mlp_roofline, &j);
    for (const auto& [key, e] : j["step_share"].items()) {
      if (e.contains("gemm_share_of_compute")) {
        summary += " " + key.substr(0, key.size() - 3) +
                   "_gemm_share=" + Fmt(e["gemm_share_of_compute"].get<double>());
      }
    }
  }
  j["load_avg_end"] = LoadAvg();
  j["summary"] = "summary:" + summary;
  std::ofstream f(out);
  f << j.dump(2) << "\n";
  if (!f) return bench::ExitWith(kBench, Internal("cannot write ", out));
  std::printf("# results: %s (load avg %s -> %s)\n", out.c_str(),
              j["load_avg_start"].get<std::string>().c_str(),
              j["load_avg_end"].get<std::string>().c_str());
  std::printf("summary:%s\n", summary.c_str());
  return 0;
}

}  // namespace
}  // namespace shardema

int main(int argc, char** argv) { return shardema::Run(argc, argv); }
