#include "nn/attention.h"

#include "nn/isa_kernels.h"

namespace shardema::nn {

Status CheckAttentionShape(const AttentionShape& s) {
  if (s.batch < 1 || s.seq < 1 || s.dim < 1 || s.heads < 1 || s.dim % s.heads != 0) {
    return InvalidArgument("attention: bad shape B=", s.batch, " T=", s.seq, " C=", s.dim,
                           " n_head=", s.heads, " (all positive, n_head dividing C)");
  }
  return Status::Ok();
}

Status AttentionForward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,
                        float* out, float* att) {
  RETURN_IF_ERROR(CheckAttentionShape(s));
  SHARDEMA_ISA_DISPATCH(isa, AttentionForward, ctx, s, qkv, out, att);
  return Status::Ok();
}

Status AttentionBackward(const CpuContext& ctx, const AttentionShape& s, const float* qkv,
                         const float* att, const float* dout, float* dqkv) {
  RETURN_IF_ERROR(CheckAttentionShape(s));
  SHARDEMA_ISA_DISPATCH(isa, AttentionBackward, ctx, s, qkv, att, dout, dqkv);
  return Status::Ok();
}

}  // namespace shardema::nn
