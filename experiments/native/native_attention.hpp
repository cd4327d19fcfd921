// A native FP32 attention (Eigen GEMMs compiled for the host CPU): the speed anchor `attnsim
// bench` states the simulators' times against. Not bit-exact to anything; it is what this machine
// computes attention at when no GPU operation is modelled.
#pragma once

namespace attnsim {

// O = softmax(Q Kᵀ · sm_scale) V per (batch, query head), Q [batch][heads_q][len_q][d], K
// [batch][heads_kv][len_kv][d], V [...][dv], O [batch][heads_q][len_q][dv] row-major; GQA
// (query head h reads KV head h / (heads_q / heads_kv)); causal bottom-right aligned as
// AttentionInput. One thread. Rows of 128 queries at a time: S = Q Kᵀ over the keys the rows can
// see, the row softmax in Eigen's vectorized exp, O = P V.
void native_attention(const float* q, const float* k, const float* v, float* o, int batch,
                      int heads_q, int heads_kv, int len_q, int len_kv, int d, int dv, bool causal,
                      double sm_scale);

// The same compiled for AVX2 + FMA + F16C (x86-64 builds; false elsewhere): the anchor `attnsim
// bench --native` takes under `--isa avx2`, so that an AVX-512 host measures the ratios an
// AVX2-only CPU's build would give.
bool native_attention_avx2_available();
void native_attention_avx2(const float* q, const float* k, const float* v, float* o, int batch,
                           int heads_q, int heads_kv, int len_q, int len_kv, int d, int dv,
                           bool causal, double sm_scale);

}  // namespace attnsim
