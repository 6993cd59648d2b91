#include "nn/cuda/cudnn_attention.h"

#include <cmath>
#include <cstdlib>
#include <exception>
#include <string>
#include <unordered_map>
#include <utility>

#if SHARDEMA_WITH_CUDNN
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cudnn_frontend.h>
#endif

namespace shardema::nn {

#if SHARDEMA_WITH_CUDNN

}  // namespace shardema::nn

// With NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING the frontend resolves every cuDNN call through this
// handle, which the program that opens the library defines and sets (CudnnVersion below).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace shardema::nn {
namespace {

namespace fe = cudnn_frontend;

// Tensor uids of the variant packs.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

// The frontend opens the CUDA runtime for a few calls: the one this binary is linked with. Named
// while the program loads, before any thread exists (setenv may not race with another thread's
// getenv, and NCCL's threads are running by the time cuDNN is first used).
[[maybe_unused]] const bool kCudartNamed = [] {
  const std::string cudart = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  return setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", cudart.c_str(), /*overwrite=*/0) == 0;
}();

StatusOr<int64_t> OpenCudnn() {
  const char* env = std::getenv("SHARDEMA_CUDNN_LIBRARY");
  const std::string name = env != nullptr && env[0] != '\0' ? env : "libcudnn.so.9";
  dlerror();
  void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (h == nullptr) {
    const char* why = dlerror();
    return Unavailable("cuDNN: cannot open ", name, ": ", why != nullptr ? why : "unknown error",
                       " (set SHARDEMA_CUDNN_LIBRARY to its path, or add its folder to "
                       "LD_LIBRARY_PATH)");
  }
  using GetVersion = size_t (*)();
  auto get = reinterpret_cast<GetVersion>(dlsym(h, "cudnnGetVersion"));
  if (get == nullptr) {
    dlclose(h);
    return Unavailable("cuDNN: ", name, " has no cudnnGetVersion: not a cuDNN library");
  }
  const int64_t v = int64_t(get());
  if (v < kCudnnMinVersion || v >= 100000) {
    dlclose(h);
    return Unavailable("cuDNN: ", name, " is version ", v,
                       "; this build needs 9.x (>= ", kCudnnMinVersion, ")");
  }
  fe::cudnn_dlhandle = h;  // kept open for the life of the process
  return v;
}

fe::DataType_t FeType(DType t) {
  return t == DType::kBF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

std::string Describe(const AttentionShape& s) {
  return "B " + std::to_string(s.batch) + " T " + std::to_string(s.seq) + " nh " +
         std::to_string(s.heads) + " hs " + std::to_string(s.head_dim());
}

// Runs a frontend call that reports an error_t (and, with dynamic loading, may throw).
template <typename F>
Status Fe(const char* what, const AttentionShape& s, StatusCode code, F&& f) {
  try {
    fe::error_t e = f();
    if (e.is_good()) return Status::Ok();
    return Err(code, "cuDNN attention ", what, " (", Describe(s), "): ", e.get_message());
  } catch (const std::exception& ex) {
    return Err(code, "cuDNN attention ", what, " (", Describe(s), "): ", ex.what());
  }
}

}  // namespace

bool CudnnAttentionBuilt() { return true; }

StatusOr<int64_t> CudnnVersion() {
  static const StatusOr<int64_t> v = OpenCudnn();
  return v;
}

CudnnAttention::CudnnAttention(Stream stream, DType io) : stream_(stream), io_(io) {}

StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(Stream stream, DType io) {
  if (io != DType::kBF16 && io != DType::kF16) {
    return InvalidArgument("CudnnAttention::Create: operand dtype ", DTypeName(io),
                           " is not bf16 or f16");
  }
  if (!stream.device.is_cuda()) {
    return InvalidArgument("CudnnAttention::Create: stream of ", stream.device.ToString(),
                           " is not a CUDA stream");
  }
  if (CudaDeviceCount() == 0) return Unavailable("CudnnAttention::Create: no CUDA device visible");
  RETURN_IF_ERROR(CudnnVersion().status());
  RETURN_IF_ERROR(SetCurrentDevice(stream.device));
  std::unique_ptr<CudnnAttention> a(new CudnnAttention(stream, io));
  try {
    cudnnHandle_t h = nullptr;
    cudnnStatus_t st = fe::detail::create_handle(&h);
    if (st != CUDNN_STATUS_SUCCESS) {
      return Internal("cudnnCreate failed: ", fe::detail::get_error_string(st));
    }
    a->handle_ = h;
    st = fe::detail::set_stream(h, static_cast<cudaStream_t>(stream.native));
    if (st != CUDNN_STATUS_SUCCESS) {
      return Internal("cudnnSetStream failed: ", fe::detail::get_error_string(st));
    }
  } catch (const std::exception& ex) {
    return Unavailable("CudnnAttention::Create: ", ex.what());
  }
  return a;
}

CudnnAttention::~CudnnAttention() {
  if (handle_ == nullptr) return;
  (void)SetCurrentDevice(stream_.device);
  // The handle outlives the plans built with it (as in cuDNN's samples); freeing the workspace
  // first (cudaFree synchronises the device) lets no queued graph run while its plan goes.
  workspace_ = Buffer();
  graphs_.clear();
  try {
    (void)fe::detail::destroy_handle(static_cast<cudnnHandle_t>(handle_));
  } catch (const std::exception&) {}
}

// The forward and backward graphs of shape s. With a handle: built for its device, plans
// included. Without (dp: the device's properties, sm_version): lowered for that device and their
// engines' support checked; nothing compiled (CheckCudnnAttentionGraphs).
static Status MakeGraphs(const AttentionShape& s, DType io, cudnnHandle_t h,
                         const std::shared_ptr<fe::DeviceProperties>& dp, int sm_version,
                         std::shared_ptr<fe::graph::Graph>* fwd,
                         std::shared_ptr<fe::graph::Graph>* bwd) {
  const int64_t B = s.batch, T = s.seq, C = s.dim, nh = s.heads, hs = s.head_dim();
  const float scale = float(1.0 / std::sqrt(double(hs)));
  const std::vector<int64_t> head_dims{B, nh, T, hs}, qkv_strides{3 * C * T, hs, 3 * C, 1},
      o_strides{C * T, hs, C, 1}, stats_dims{B, nh, T, 1}, stats_strides{nh * T, T, 1, 1};
  // Q, K, V (and their gradients) are strided views of qkv; O and dO of [B, T, C].
  auto head_tensor = [&](fe::graph::Graph& graph, const char* name, int64_t uid,
                         const std::vector<int64_t>& strides) {
    return graph.tensor(
        fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(head_dims).set_stride(
            strides));
  };
  auto new_graph = [&]() {
    auto graph = std::make_shared<fe::graph::Graph>();
    if (h == nullptr) graph->set_device_properties(dp).set_sm_version(sm_version);
    graph->set_io_data_type(FeType(io))
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    return graph;
  };
  auto build = [&](fe::graph::Graph& graph) -> fe::error_t {
    fe::error_t e = graph.validate();
    if (e.is_bad()) return e;
    e = h != nullptr ? graph.build_operation_graph(h) : graph.build_operation_graph();
    if (e.is_bad()) return e;
    e = graph.create_execution_plans({fe::HeurMode_t::A});
    if (e.is_bad()) return e;
    e = h != nullptr ? graph.check_support(h) : graph.check_support();
    if (e.is_bad() || h == nullptr) return e;
    return graph.build_plans(h);
  };

  RETURN_IF_ERROR(Fe("forward graph", s, StatusCode::kUnimplemented, [&]() {
    *fwd = new_graph();
    auto q = head_tensor(**fwd, "Q", kQ, qkv_strides);
    auto k = head_tensor(**fwd, "K", kK, qkv_strides);
    auto v = head_tensor(**fwd, "V", kV, qkv_strides);
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("causal_attention")
                    .set_generate_stats(true)
                    .set_attn_scale(scale)
                    .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                    .set_diagonal_band_right_bound(0);
    auto [o, stats] = (*fwd)->sdpa(q, k, v, opts);
    o->set_output(true).set_uid(kO).set_dim(head_dims).set_stride(o_strides);
    stats->set_output(true)
        .set_uid(kStats)
        .set_data_type(fe::DataType_t::FLOAT)
        .set_dim(stats_dims)
        .set_stride(stats_strides);
    return build(**fwd);
  }));
  return Fe("backward graph", s, StatusCode::kUnimplemented, [&]() {
    *bwd = new_graph();
    auto q = head_tensor(**bwd, "Q", kQ, qkv_strides);
    auto k = head_tensor(**bwd, "K", kK, qkv_strides);
    auto v = head_tensor(**bwd, "V", kV, qkv_strides);
    auto o = head_tensor(**bwd, "O", kO, o_strides);
    auto dout = head_tensor(**bwd, "dO", kDO, o_strides);
    auto stats = (*bwd)->tensor(fe::graph::Tensor_attributes()
                                    .set_name("Stats")
                                    .set_uid(kStats)
                                    .set_dim(stats_dims)
                                    .set_stride(stats_strides)
                                    .set_data_type(fe::DataType_t::FLOAT));
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("causal_attention_backward")
                    .set_attn_scale(scale)
                    .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                    .set_diagonal_band_right_bound(0)
                    .set_deterministic_algorithm(true);
    auto [dq, dk, dv] = (*bwd)->sdpa_backward(q, k, v, o, dout, stats, opts);
    dq->set_output(true).set_uid(kDQ).set_dim(head_dims).set_stride(qkv_strides);
    dk->set_output(true).set_uid(kDK).set_dim(head_dims).set_stride(qkv_strides);
    dv->set_output(true).set_uid(kDV).set_dim(head_dims).set_stride(qkv_strides);
    return build(**bwd);
  });
}

Status CheckCudnnAttentionGraphs(const AttentionShape& s, DType io, const std::string& device_json,
                                 int sm_version) {
  RETURN_IF_ERROR(CheckAttentionShape(s));
  if (io != DType::kBF16 && io != DType::kF16) {
    return InvalidArgument("CheckCudnnAttentionGraphs: operand dtype ", DTypeName(io),
                           " is not bf16 or f16");
  }
  RETURN_IF_ERROR(CudnnVersion().status());
  auto dp = std::make_shared<fe::DeviceProperties>();
  RETURN_IF_ERROR(Fe("device properties", s, StatusCode::kInvalidArgument, [&]() {
    std::vector<uint8_t> json(device_json.begin(), device_json.end());
    json.push_back(0);
    return dp->deserialize(json);
  }));
  std::shared_ptr<fe::graph::Graph> fwd, bwd;
  return MakeGraphs(s, io, nullptr, dp, sm_version, &fwd, &bwd);
}

struct CudnnAttention::Graphs {
  std::shared_ptr<fe::graph::Graph> fwd, bwd;
};

StatusOr<CudnnAttention::Graphs*> CudnnAttention::Get(const AttentionShape& s) {
  RETURN_IF_ERROR(CheckAttentionShape(s));
  const Key key{s.batch, s.seq, s.dim, s.heads};
  auto it = graphs_.find(key);
  if (it != graphs_.end()) return it->second.get();
  auto g = std::make_unique<Graphs>();
  RETURN_IF_ERROR(
      MakeGraphs(s, io_, static_cast<cudnnHandle_t>(handle_), nullptr, 0, &g->fwd, &g->bwd));
  int64_t ws_fwd = 0, ws_bwd = 0;
  RETURN_IF_ERROR(Fe("workspace size", s, StatusCode::kInternal,
                     [&]() { return g->fwd->get_workspace_size(ws_fwd); }));
  RETURN_IF_ERROR(Fe("workspace size", s, StatusCode::kInternal,
                     [&]() { return g->bwd->get_workspace_size(ws_bwd); }));
  const size_t ws = size_t(std::max<int64_t>({ws_fwd, ws_bwd, 1}));
  if (workspace_.size() < ws) {
    RETURN_IF_ERROR(SynchronizeStream(stream_));  // queued graphs may still use it
    workspace_ = Buffer();
    ASSIGN_OR_RETURN(workspace_, Buffer::Allocate(ws, stream_.device));
  }
  Graphs* out = g.get();
  graphs_.emplace(key, std::move(g));
  return out;
}

Status CudnnAttention::Prepare(const AttentionShape& s) { return Get(s).status(); }

Status CudnnAttention::Forward(const AttentionShape& s, const void* qkv, void* o, float* lse) {
  if (qkv == nullptr || o == nullptr || lse == nullptr) {
    return InvalidArgument("CudnnAttention::Forward: null buffer");
  }
  ASSIGN_OR_RETURN(Graphs * g, Get(s));
  const size_t es = DTypeSize(io_);
  auto base = static_cast<char*>(const_cast<void*>(qkv));
  std::unordered_map<int64_t, void*> pack{{kQ, base},
                                          {kK, base + size_t(s.dim) * es},
                                          {kV, base + 2 * size_t(s.dim) * es},
                                          {kO, o},
                                          {kStats, lse}};
  return Fe("forward", s, StatusCode::kInternal, [&]() {
    return g->fwd->execute(static_cast<cudnnHandle_t>(handle_), pack, workspace_.data());
  });
}

Status CudnnAttention::Backward(const AttentionShape& s, const void* qkv, const void* o,
                                const float* lse, const void* dout, void* dqkv) {
  if (qkv == nullptr || o == nullptr || lse == nullptr || dout == nullptr || dqkv == nullptr) {
    return InvalidArgument("CudnnAttention::Backward: null buffer");
  }
  ASSIGN_OR_RETURN(Graphs * g, Get(s));
  const size_t es = DTypeSize(io_), c = size_t(s.dim) * es;
  auto in = static_cast<char*>(const_cast<void*>(qkv));
  auto d = static_cast<char*>(dqkv);
  std::unordered_map<int64_t, void*> pack{{kQ, in},
                                          {kK, in + c},
                                          {kV, in + 2 * c},
                                          {kO, const_cast<void*>(o)},
                                          {kDO, const_cast<void*>(dout)},
                                          {kStats, const_cast<float*>(lse)},
                                          {kDQ, d},
                                          {kDK, d + c},
                                          {kDV, d + 2 * c}};
  return Fe("backward", s, StatusCode::kInternal, [&]() {
    return g->bwd->execute(static_cast<cudnnHandle_t>(handle_), pack, workspace_.data());
  });
}

#else  // !SHARDEMA_WITH_CUDNN

struct CudnnAttention::Graphs {};

bool CudnnAttentionBuilt() { return false; }

Status CheckCudnnAttentionGraphs(const AttentionShape&, DType, const std::string&, int) {
  return CudnnVersion().status();
}

StatusOr<int64_t> CudnnVersion() {
  return Unavailable(SHARDEMA_WITH_CUDA ? "cuDNN: this CUDA build has no cuDNN frontend headers "
                                          "(tools/setup.sh fetches them)"
                                        : "cuDNN: this binary was built without --config=cuda");
}

CudnnAttention::CudnnAttention(Stream stream, DType io) : stream_(stream), io_(io) {}
CudnnAttention::~CudnnAttention() = default;

StatusOr<std::unique_ptr<CudnnAttention>> CudnnAttention::Create(Stream, DType) {
  return CudnnVersion().status();
}
StatusOr<CudnnAttention::Graphs*> CudnnAttention::Get(const AttentionShape&) {
  return CudnnVersion().status();
}
Status CudnnAttention::Prepare(const AttentionShape&) { return CudnnVersion().status(); }
Status CudnnAttention::Forward(const AttentionShape&, const void*, void*, float*) {
  return CudnnVersion().status();
}
Status CudnnAttention::Backward(const AttentionShape&, const void*, const void*, const float*,
                                const void*, void*) {
  return CudnnVersion().status();
}

#endif  // SHARDEMA_WITH_CUDNN

}  // namespace shardema::nn
