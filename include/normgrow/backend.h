// normgrow: the backend op table, the seam between the model and the hardware:
// what every backend implements and what the model calls.
//
// The model, losses, optimizer and diagnostics are written once (ref/) against
// this table. Each backend has its own header for how it is made and what it
// probes (backend_cpu.h, backend_onednn.h, backend_cuda.h); callers open one by
// name through the registry (registry.h). This header needs no library. Every buffer passed to an op is owned by the backend (host memory
// for the CPU backend, device memory for CUDA): fp32 row-major unless the name
// says otherwise. An op is a forward/backward pair; a backward takes the saved
// forward values it needs and ACCUMULATES (+=) into parameter gradients; into
// input gradients it writes or accumulates as its comment says.
//
// Shapes use N = B*T rows (tokens), D = hidden, H/KV = query/key-value heads,
// hd = head_dim, F = intermediate, V = vocabulary.
//
// Ops may run asynchronously (a device queue). The synchronization points,
// where every op issued before has finished, are the ops that return host
// values: download, ce_kd and ce_kd_topk (*ce, *kd, *n_valid), sumsq; and
// synchronize. Every other op only queues work.
//
// Precision (docs/golden-contract.md "bf16 mode"): in NG_PREC_BF16 mode the
// inputs of every matmul and of attention's two products (scores, values) are
// rounded to bf16 and accumulated in fp32; buffers, weights, AdamW moments,
// norms and loss stay fp32. NG_PREC_FP32 is plain fp32 (no TF32, no bf16 inside).
#ifndef NORMGROW_BACKEND_H
#define NORMGROW_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "normgrow/enums.h"

typedef struct ng_backend ng_backend;
typedef struct ng_comm ng_comm;  // comm.h

// Attention geometry of one call.
typedef struct {
  int64_t B, T, H, KV, hd;
} ng_attn_shape;

// Per-row loss terms of the fused softmax + CE + KD (see ng_backend.ce_kd).
typedef struct {
  double kd_weight;    // alpha: loss = alpha*kd + (1-alpha)*ce (ce alone without teacher)
  double temperature;  // tau
  // Columns the softmaxes run over: ids [0, vocab_used) of rows of V (0 = all
  // V). A model's vocabulary may be padded past its tokenizer's (Qwen3: 151936
  // rows for 151669 tokens); the padding ids are never targets and take no
  // part in CE or KD, for student and teacher alike, and get zero gradient.
  int64_t vocab_used;
  // Rows the loss is averaged over: ce, kd and dlogits are sums over this
  // call's valid rows divided by n_norm (0 = this call's own valid rows). Calls
  // over chunks of a batch, each given the batch's valid rows, add up to one
  // call over the whole batch (row for row the same dlogits).
  int64_t n_norm;
  // The kd term's divergence (enums.h), beta for jsd: chosen here, in one
  // place, for both teacher kinds (the top-k cache between bucketed distributions).
  ng_divergence divergence;
  double beta;
} ng_loss_params;

// Linear layers that share one input x [N, in] (q/k/v; gate/up; or one alone):
// y_i = x W_i^T with W_i [out_i, in], i < n.
// For a backend that reads its weights in bf16 (ng_backend.bf16_weights), the
// model keeps each weight's bf16 rounding, W_bf16[i] [out_i, in]: with
// bf16_ready it holds W_i's current values and the backend reads it instead of
// rounding W_i again; without, the backend writes its rounding of W_i there (a
// later call of the same pass then reads it ready). NULL for other backends.
// A training model keeps the input's rounding the same way, x_bf16 [N, in]:
// the forward writes it (x_ready false), the backward of the same pass reads
// it (x_ready true), so x is rounded once a step.
#define NG_LINEAR_MAX 3
typedef struct {
  int n;                          // 1..NG_LINEAR_MAX
  const float *W[NG_LINEAR_MAX];  // W_i [out_i, in]
  int64_t out[NG_LINEAR_MAX];
  uint16_t *W_bf16[NG_LINEAR_MAX];
  bool bf16_ready;
  uint16_t *x_bf16;               // NULL: none kept
  bool x_ready;
} ng_linear;

typedef struct {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;        // 1-based step number for bias correction
  double grad_scale;   // global-norm clipping coefficient (1 = none)
} ng_adamw_params;

struct ng_backend {
  const char *name;
  ng_precision precision;
  unsigned divergences;  // bit 1 << d for every ng_divergence d its loss ops compute
  bool host_memory;      // its buffers are the machine's memory (a device's otherwise)
  bool bf16_weights;     // its linear ops read and fill ng_linear.W_bf16, x_bf16 (see ng_linear)
  // For a backend of device memory: makes an "mpi" communicator carry its
  // buffers, in place (comm.h ng_comm_bind; cuda: NCCL); NULL for host memory.
  int (*bind_comm)(ng_backend *be, ng_comm *c);
  void *ctx;  // the backend's own state (primitive caches, streams); NULL for the CPU

  // Waits until every op issued before has finished.
  void (*synchronize)(ng_backend *be);
  // Frees the context and the backend itself (through ng_backend_close).
  void (*destroy)(ng_backend *be);
  // The kernels its matmuls ran so far, in words ("OpenBLAS SkylakeX",
  // "oneDNN brg:avx512_core_amx_bf16"), for benchmarks.
  const char *(*kernels)(ng_backend *be);

  // --- memory -------------------------------------------------------------
  void *(*alloc)(ng_backend *be, size_t bytes);              // zero-filled
  void (*free)(ng_backend *be, void *p);                      // free(NULL) is a no-op
  void (*upload)(ng_backend *be, void *dst, const void *src, size_t bytes);
  void (*download)(ng_backend *be, void *dst, const void *src, size_t bytes);
  void (*copy)(ng_backend *be, void *dst, const void *src, size_t bytes);
  void (*zero)(ng_backend *be, void *p, size_t bytes);

  // --- linear algebra -----------------------------------------------------
  // C [M, N] = op(A) op(B) + beta * C, with op(A) [M, K], op(B) [K, N];
  // ta: A is stored [K, M]; tb: B is stored [N, K]. Packed row-major.
  void (*matmul)(ng_backend *be, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                 const float *A, const float *B, float beta, float *C);

  // --- linear layers --------------------------------------------------------
  // y_i [N, out_i] = x [N, in] W_i^T for each weight of l: the matmuls above, with
  // x rounded to bf16 once for all of them in bf16 mode (a backend whose matmuls
  // round their inputs may do so).
  void (*linear_forward)(ng_backend *be, ng_linear l, const float *x, int64_t N, int64_t in,
                         float *const y[]);
  // For i = 0, 1, ..: dW_i [out_i, in] += dy_i^T x (skipped when dW_i is NULL: frozen),
  // then dx [N, in] = dy_i W_i + beta dx, with beta = beta_dx for i = 0 and 1 after (the
  // matmuls above in this order; in bf16 mode x and each dy_i rounded once, x not at all
  // when its copy is ready).
  void (*linear_backward)(ng_backend *be, ng_linear l, const float *x, const float *const dy[],
                          int64_t N, int64_t in, float beta_dx, float *dx, float *const dW[]);

  // --- embedding ----------------------------------------------------------
  // out [N, D] = weight[tokens[i]]
  void (*embedding_forward)(ng_backend *be, const int32_t *tokens, const float *weight,
                            int64_t N, int64_t D, float *out);
  // dweight [V, D] += scatter of dout [N, D] by tokens
  void (*embedding_backward)(ng_backend *be, const int32_t *tokens, const float *dout,
                             int64_t N, int64_t D, float *dweight);

  // --- RMSNorm over the last dimension ------------------------------------
  // y [R, C] = w [C] * x * rstd, rstd [R] = 1/sqrt(mean(x^2) + eps) (saved)
  void (*rmsnorm_forward)(ng_backend *be, const float *x, const float *w, int64_t R,
                          int64_t C, float eps, float *y, float *rstd);
  // dx [R, C] += d/dx, dw [C] += d/dw (dw may be NULL), given dy [R, C] and the saved x, rstd
  void (*rmsnorm_backward)(ng_backend *be, const float *x, const float *w,
                           const float *rstd, const float *dy, int64_t R, int64_t C,
                           float *dx, float *dw);

  // --- rotary embedding, rotate-half, positions 0..T-1 in each row ---------
  // x [B, T, nh, hd] rotated in place; backward rotates dx by the inverse.
  void (*rope_forward)(ng_backend *be, float *x, int64_t B, int64_t T, int64_t nh,
                       int64_t hd, double theta);
  void (*rope_backward)(ng_backend *be, float *dx, int64_t B, int64_t T, int64_t nh,
                        int64_t hd, double theta);

  // --- causal grouped-query attention --------------------------------------
  // q [B, T, H, hd], k, v [B, T, KV, hd] -> out [B, T, H, hd], lse [B, H, T]
  // (log-sum-exp of each scaled score row, saved for the backward).
  void (*attention_forward)(ng_backend *be, ng_attn_shape s, const float *q,
                            const float *k, const float *v, float *out, float *lse);
  // Writes dq [B, T, H, hd], dk, dv [B, T, KV, hd] (overwritten, not accumulated).
  void (*attention_backward)(ng_backend *be, ng_attn_shape s, const float *q,
                             const float *k, const float *v, const float *out,
                             const float *lse, const float *dout, float *dq, float *dk,
                             float *dv);

  // --- SwiGLU: s = silu(gate) * up, all [R, F] ------------------------------
  void (*swiglu_forward)(ng_backend *be, const float *gate, const float *up, int64_t n,
                         float *s);
  // Writes dgate, dup [n] from ds [n].
  void (*swiglu_backward)(ng_backend *be, const float *gate, const float *up,
                          const float *ds, int64_t n, float *dgate, float *dup);

  // --- elementwise ----------------------------------------------------------
  // y [n] = a + b (y may alias a or b)
  void (*add)(ng_backend *be, const float *a, const float *b, int64_t n, float *y);
  // y [n] = (1 - g) * a + g * b (the growth gate; y may alias a or b)
  void (*lerp)(ng_backend *be, const float *a, const float *b, float g, int64_t n, float *y);
  // y [n] = s * x  (y may alias x)
  void (*scale)(ng_backend *be, const float *x, float s, int64_t n, float *y);
  // y [R, C] = x * gamma, gamma [C] one factor per channel (LayerScale; y may alias x)
  void (*channel_scale_forward)(ng_backend *be, const float *x, const float *gamma, int64_t R,
                                int64_t C, float *y);
  // dx [R, C] = dy * gamma (written; dx may alias dy) and dgamma [C] += sum over the R
  // rows of dy * x (dgamma may be NULL: a frozen scale), x the forward's input.
  void (*channel_scale_backward)(ng_backend *be, const float *x, const float *gamma,
                                 const float *dy, int64_t R, int64_t C, float *dx, float *dgamma);

  // --- fused softmax + CE + KD over the vocabulary ------------------------
  // logits [N, V], teacher [N, V] or NULL, targets [N] (-1 = ignored).
  // kd is tau^2 lp.divergence(softmax(teacher / tau), softmax(logits / tau)).
  // Returns mean ce and kd over the non-ignored rows (or over lp.n_norm rows)
  // in *ce, *kd (host) and the count of non-ignored rows in *n_valid. When dlogits [N, V] is not NULL it receives
  // d loss / d logits (written, not accumulated).
  void (*ce_kd)(ng_backend *be, const float *logits, const float *teacher,
                const int32_t *targets, int64_t N, int64_t V, ng_loss_params lp,
                float *dlogits, double *ce, double *kd, int64_t *n_valid);

  // Same with the teacher given by a top-k cache: per row its k largest logits
  // (topk_ids, topk_vals [N, k]), the log-sum-exp of all its logits at the
  // temperature (topk_lse [N]) and the log of its mass on the other ids
  // (topk_rest [N], log Q_rest; -inf: none). KD is lp.divergence between the
  // bucketed distributions {the k cached tokens, everything else}: exact when k = V.
  void (*ce_kd_topk)(ng_backend *be, const float *logits, const int32_t *topk_ids,
                     const float *topk_vals, const float *topk_lse, const float *topk_rest, int64_t k,
                     const int32_t *targets, int64_t N, int64_t V, ng_loss_params lp,
                     float *dlogits, double *ce, double *kd, int64_t *n_valid);

  // --- optimizer --------------------------------------------------------------
  // Sum of squares of x [n], accumulated in double (host result).
  double (*sumsq)(ng_backend *be, const float *x, int64_t n);
  // One AdamW step on p [n] with gradient g * grad_scale and moments m, v [n].
  // decay selects decoupled weight decay (tensors of 2 or more dimensions).
  void (*adamw)(ng_backend *be, float *p, const float *g, float *m, float *v, int64_t n,
                ng_adamw_params ap, bool decay);

  // --- storage ------------------------------------------------------------------
  // y [n] = x [n] widened from bf16 (the upper 16 bits of an fp32): exact.
  void (*widen_bf16)(ng_backend *be, const uint16_t *x, int64_t n, float *y);

  // --- diagnostics --------------------------------------------------------------
  // rms [R] = sqrt(mean over C of x^2), no eps; x [R, C]
  void (*row_rms)(ng_backend *be, const float *x, int64_t R, int64_t C, float *rms);

  // --- the teacher's top-k cache (topk.h) -----------------------------------------
  // For each row of logits [R, ld], over its first V columns: the k largest (k <= V)
  // into ids, vals [R, k] (k distinct ids; which ids hold values tied with the k-th
  // largest, and their order, are the backend's: the CPU's ng_top_k scan, cuda's the
  // ids above the k-th value ascending, then the lowest tied ones ascending), and
  // lse [R] = log sum_j exp(x_j inv_tau) and rest [R] = log of the mass off the
  // k kept ids, log sum_{j not kept} exp(x_j inv_tau) - lse (-inf when k = V),
  // each max-subtracted and summed in double over the ids themselves
  // (ng_topk_logmass; the order of the sums is the backend's). Only these leave the row.
  void (*topk)(ng_backend *be, const float *logits, int64_t R, int64_t ld, int64_t V, int64_t k,
               double inv_tau, uint32_t *ids, float *vals, float *lse, float *rest);
};

// linear_forward and linear_backward as the backend's matmuls, one call each in
// the order given there: the table entries of a backend whose matmuls are all
// it needs (cpu, cuda).
void ng_linear_forward_matmuls(ng_backend *be, ng_linear l, const float *x, int64_t N,
                               int64_t in, float *const y[]);
void ng_linear_backward_matmuls(ng_backend *be, ng_linear l, const float *x,
                                const float *const dy[], int64_t N, int64_t in, float beta_dx,
                                float *dx, float *const dW[]);

// 0 when be's loss ops compute divergence d; else fails with one line naming both.
int ng_backend_check_divergence(const ng_backend *be, ng_divergence d);

#endif
