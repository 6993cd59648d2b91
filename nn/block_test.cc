// A composed model from the kit, checked end to end against finite differences: a one-block
// nanoGPT (token + position embedding, pre-LN block with causal attention and a tanh-GELU MLP,
// residual adds, final LayerNorm, lm_head tied to the token embedding, mean cross-entropy).
#include <gtest/gtest.h>

#include <vector>

#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/grad_check.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/residual.h"

namespace shardema::nn {
namespace {

using testing::ExpectGradient;
using testing::Uniform;

constexpr int64_t B = 2, T = 4, C = 4, NH = 2, V = 7, BT = B * T;
constexpr float kEps = 1e-5f;

// Parameters, in one list so the test can walk all of them.
struct Params {
  std::vector<float> wte, wpe, ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w,
      fc_b, mlp_w, mlp_b, lnf_w, lnf_b;
  std::vector<std::vector<float>*> All() {
    return {&wte,   &wpe,   &ln1_w, &ln1_b, &attn_w, &attn_b, &proj_w, &proj_b,
            &ln2_w, &ln2_b, &fc_w,  &fc_b,  &mlp_w,  &mlp_b,  &lnf_w,  &lnf_b};
  }
};

Params Init(uint32_t seed, bool zeros) {
  const int64_t sizes[] = {V * C, T * C, C,         C,     3 * C * C, 3 * C, C * C, C,
                           C,     C,     4 * C * C, 4 * C, 4 * C * C, C,     C,     C};
  Params p;
  std::vector<std::vector<float>*> all = p.All();
  for (size_t i = 0; i < all.size(); ++i) {
    *all[i] = zeros ? std::vector<float>(size_t(sizes[i]), 0.f)
                    : Uniform(size_t(sizes[i]), seed + uint32_t(i), -0.8f, 0.8f);
  }
  for (auto* ln : {&p.ln1_w, &p.ln2_w, &p.lnf_w}) {
    for (float& v : *ln) v = zeros ? 0.f : 1.f + 0.5f * v;
  }
  return p;
}

struct Activations {
  std::vector<float> x0, h1, m1, r1, qkv, att, y, a1, x1, h2, m2, r2, f, g, a2, x2, h3, m3, r3,
      logits;
};

// Returns the loss; fills the activations.
double Forward(const CpuContext& ctx, const Params& p, const std::vector<int64_t>& ids,
               const std::vector<int64_t>& targets, Activations* a) {
  auto sized = [](std::vector<float>* v, int64_t n) { v->assign(size_t(n), 0.f); };
  sized(&a->x0, BT * C);
  EXPECT_TRUE(EmbeddingForward(ctx, ids.data(), BT, p.wte.data(), V, C, a->x0.data()).ok());
  PositionEmbeddingForward(ctx, p.wpe.data(), B, T, C, a->x0.data());
  sized(&a->h1, BT * C), sized(&a->m1, BT), sized(&a->r1, BT);
  LayerNormForward(ctx, a->x0.data(), p.ln1_w.data(), p.ln1_b.data(), BT, C, kEps, a->h1.data(),
                   a->m1.data(), a->r1.data());
  sized(&a->qkv, BT * 3 * C);
  LinearForward(ctx, a->h1.data(), p.attn_w.data(), p.attn_b.data(), BT, C, 3 * C, a->qkv.data());
  const AttentionShape s{B, T, C, NH};
  sized(&a->att, s.att_numel()), sized(&a->y, BT * C);
  EXPECT_TRUE(AttentionForward(ctx, s, a->qkv.data(), a->y.data(), a->att.data()).ok());
  sized(&a->a1, BT * C);
  LinearForward(ctx, a->y.data(), p.proj_w.data(), p.proj_b.data(), BT, C, C, a->a1.data());
  sized(&a->x1, BT * C);
  ResidualForward(ctx, a->x0.data(), a->a1.data(), a->x1.data(), BT * C);
  sized(&a->h2, BT * C), sized(&a->m2, BT), sized(&a->r2, BT);
  LayerNormForward(ctx, a->x1.data(), p.ln2_w.data(), p.ln2_b.data(), BT, C, kEps, a->h2.data(),
                   a->m2.data(), a->r2.data());
  sized(&a->f, BT * 4 * C), sized(&a->g, BT * 4 * C);
  LinearForward(ctx, a->h2.data(), p.fc_w.data(), p.fc_b.data(), BT, C, 4 * C, a->f.data());
  ActivationForward(ctx, Activation::kGeluTanh, a->f.data(), a->g.data(), BT * 4 * C);
  sized(&a->a2, BT * C);
  LinearForward(ctx, a->g.data(), p.mlp_w.data(), p.mlp_b.data(), BT, 4 * C, C, a->a2.data());
  sized(&a->x2, BT * C);
  ResidualForward(ctx, a->x1.data(), a->a2.data(), a->x2.data(), BT * C);
  sized(&a->h3, BT * C), sized(&a->m3, BT), sized(&a->r3, BT);
  LayerNormForward(ctx, a->x2.data(), p.lnf_w.data(), p.lnf_b.data(), BT, C, kEps, a->h3.data(),
                   a->m3.data(), a->r3.data());
  sized(&a->logits, BT * V);
  LinearForward(ctx, a->h3.data(), p.wte.data(), nullptr, BT, C, V, a->logits.data());  // tied
  return *CrossEntropyLoss(ctx, a->logits.data(), targets.data(), BT, V, double(BT), nullptr);
}

// Gradients of every parameter into *g (overwritten).
void Backward(const CpuContext& ctx, const Params& p, const std::vector<int64_t>& ids,
              const std::vector<int64_t>& targets, const Activations& a, Params* g) {
  std::vector<float> dlogits(size_t(BT * V)), dh(size_t(BT * C)), dx(size_t(BT * C)),
      dtmp(size_t(BT * C)), dg(size_t(BT * 4 * C)), dqkv(size_t(BT * 3 * C)), dy(size_t(BT * C));
  ASSERT_TRUE(
      CrossEntropyLoss(ctx, a.logits.data(), targets.data(), BT, V, double(BT), dlogits.data())
          .ok());
  // lm_head (tied): its weight gradient goes to wte first, the embedding adds later.
  LinearBackward(ctx, a.h3.data(), p.wte.data(), dlogits.data(), BT, C, V, g->wte.data(), nullptr,
                 dh.data());
  LayerNormBackward(ctx, a.x2.data(), p.lnf_w.data(), a.m3.data(), a.r3.data(), dh.data(), BT, C,
                    dx.data(), g->lnf_w.data(), g->lnf_b.data());
  // x2 = x1 + mlp(ln2(x1)): dx flows to x1 directly and through the MLP branch.
  LinearBackward(ctx, a.g.data(), p.mlp_w.data(), dx.data(), BT, 4 * C, C, g->mlp_w.data(),
                 g->mlp_b.data(), dg.data());
  ActivationBackward(ctx, Activation::kGeluTanh, a.f.data(), dg.data(), dg.data(), BT * 4 * C);
  LinearBackward(ctx, a.h2.data(), p.fc_w.data(), dg.data(), BT, C, 4 * C, g->fc_w.data(),
                 g->fc_b.data(), dh.data());
  LayerNormBackward(ctx, a.x1.data(), p.ln2_w.data(), a.m2.data(), a.r2.data(), dh.data(), BT, C,
                    dtmp.data(), g->ln2_w.data(), g->ln2_b.data());
  AddInPlace(ctx, dx.data(), dtmp.data(), BT * C);
  // x1 = x0 + proj(attn(c_attn(ln1(x0)))).
  LinearBackward(ctx, a.y.data(), p.proj_w.data(), dx.data(), BT, C, C, g->proj_w.data(),
                 g->proj_b.data(), dy.data());
  ASSERT_TRUE(AttentionBackward(ctx, AttentionShape{B, T, C, NH}, a.qkv.data(), a.att.data(),
                                dy.data(), dqkv.data())
                  .ok());
  LinearBackward(ctx, a.h1.data(), p.attn_w.data(), dqkv.data(), BT, C, 3 * C, g->attn_w.data(),
                 g->attn_b.data(), dh.data());
  LayerNormBackward(ctx, a.x0.data(), p.ln1_w.data(), a.m1.data(), a.r1.data(), dh.data(), BT, C,
                    dtmp.data(), g->ln1_w.data(), g->ln1_b.data());
  AddInPlace(ctx, dx.data(), dtmp.data(), BT * C);
  ASSERT_TRUE(EmbeddingBackward(ctx, ids.data(), BT, dx.data(), V, C, g->wte.data(),
                                /*accumulate=*/true)
                  .ok());
  PositionEmbeddingBackward(ctx, dx.data(), B, T, C, g->wpe.data());
}

TEST(BlockTest, TinyGptGradientsMatchFiniteDifferences) {
  for (int threads : {1, 2}) {
    CpuContext ctx(threads);
    Params p = Init(60, false), g = Init(0, true);
    const std::vector<int64_t> ids = {1, 3, 3, 6, 0, 2, 5, 1};
    const std::vector<int64_t> targets = {3, 3, 6, 0, 2, 5, 1, 4};
    Activations a;
    Forward(ctx, p, ids, targets, &a);
    Backward(ctx, p, ids, targets, a, &g);
    auto loss = [&] { return Forward(ctx, p, ids, targets, &a); };
    const char* names[] = {"wte",        "wpe",        "ln1.w",  "ln1.b", "c_attn.w", "c_attn.b",
                           "proj.w",     "proj.b",     "ln2.w",  "ln2.b", "c_fc.w",   "c_fc.b",
                           "mlp_proj.w", "mlp_proj.b", "ln_f.w", "ln_f.b"};
    std::vector<std::vector<float>*> params = p.All(), grads = g.All();
    for (size_t i = 0; i < params.size(); ++i) {
      ExpectGradient(loss, params[i], *grads[i], 1e-2f, 5e-4, 1e-2, names[i]);
    }
  }
}

}  // namespace
}  // namespace shardema::nn
