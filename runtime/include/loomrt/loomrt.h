/*===- loomrt.h - Loom runtime C ABI ------------------------------*- C -*-===*\
|*                                                                            *|
|* The one interface that compiled per-rank programs call. Every backend      *|
|* (cpu, cuda) implements exactly these symbols with exactly these            *|
|* semantics, so the compiler lowers against this header only.                *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/
/*
 * Conventions shared by every function below
 * -------------------------------------------
 * - Tensors are dense and row-major unless a leading dimension ("ld") or a
 *   stride argument says otherwise. Sizes and counts are int64_t elements
 *   (never bytes, except in the memory helpers).
 * - Names of dimensions: B = batch, S = (query) sequence, Sk = key sequence,
 *   H = hidden, N = heads, D = head dim, V = vocabulary, "rows" = the product
 *   of all leading dimensions when an op works on the last one.
 * - "Activation" tensors (inputs, outputs, weights of the forward pass and
 *   their gradients) carry a loomrt_dtype argument; the tensors that are
 *   always float (log-sum-exp, losses, masks, optimizer state, statistics)
 *   are typed `float *`. Every reduction and accumulation is carried out in
 *   f32, whatever the storage dtype; results are rounded to the storage
 *   dtype once, at the end (round-to-nearest-even).
 * - Parameter gradients (dW, db, norm dw/db, embedding table gradient) take
 *   their own dtype argument (`gdtype`) so that low-precision activations can
 *   accumulate into f32 main gradients, as Megatron's main_grad does.
 * - An `accumulate` flag (0/1) selects overwrite (out = r) or gradient
 *   accumulation (out += r).
 * - Output buffers never alias input buffers unless the function says so.
 * - Misuse (bad dtype, negative size, a NULL where a tensor is required,
 *   sizes that do not divide) is a programming error of the caller: the
 *   runtime prints "loomrt: rank R: <function>: <reason>" on stderr and
 *   aborts (MPI_Abort of the whole job once MPI is up). Functions therefore
 *   return results, not status codes.
 * - Tensor arguments point to backend memory: memory from loomrt_alloc.
 *   On the cpu backend that is host memory and any host pointer works
 *   (unless LOOMRT_CHECK_DEVICE_CONTRACT=1, which enforces the rules below
 *   as a GPU would); a
 *   device backend allocates device memory there, so compiled programs
 *   touch tensors only through runtime calls (loomrt_copy for host I/O).
 *   On the cuda backend every tensor argument (int32 ids, positions,
 *   masks and f32 statistics included) is device memory; shape arrays,
 *   group lists and loomrt_adamw_multi's table are host arrays (the
 *   tensors the table lists are device memory); the single-float outputs
 *   `loss`, `masked_sum` and `mask_sum` may point to host or device memory.
 * - Calls are ordered: each sees the effects of the earlier calls of its
 *   rank. The cpu backend finishes every call before returning; kernels use
 *   the calling thread plus a pool of worker threads (OpenMP, sized by
 *   loomrt_set_num_threads). The cuda backend queues kernels on one CUDA
 *   stream per rank (NCCL on a second, ordered with events) and returns
 *   early; the calls that hand data to the host wait for the queued work:
 *   loomrt_copy, loomrt_has_nonfinite, loomrt_sum_squares, the scalar
 *   outputs of the cross-entropy functions, loomrt_barrier, loomrt_wtime,
 *   loomrt_free and loomrt_finalize.
 */
#ifndef LOOMRT_LOOMRT_H
#define LOOMRT_LOOMRT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The backends build with hidden visibility; exactly these symbols are
 * exported. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/*===----------------------------------------------------------------------===*
 * Types
 *===----------------------------------------------------------------------===*/

/* Storage type of an activation tensor. The values are part of the ABI. */
typedef int32_t loomrt_dtype;
#define LOOMRT_F32 0  /* IEEE binary32 */
#define LOOMRT_BF16 1 /* bfloat16: the upper 16 bits of a binary32 */
#define LOOMRT_F16 2  /* IEEE binary16 */

/* Bytes per element of `dtype` (4 or 2). */
int64_t loomrt_dtype_size(loomrt_dtype dtype);

/*===----------------------------------------------------------------------===*
 * Process, threads, memory, time
 *===----------------------------------------------------------------------===*/

/* Initializes MPI (MPI_Init_thread with MPI_THREAD_FUNNELED: only the thread
 * that called loomrt_init makes runtime communication calls) unless it is
 * already initialized, and installs MPI_ERRORS_RETURN on MPI_COMM_WORLD so
 * that a failed MPI call aborts the job with a message instead of hanging.
 * argc/argv may be NULL. Must precede every communication call. The cuda
 * backend also picks the rank's GPU there: the i-th rank of a node takes
 * device i modulo the device count (unless an earlier runtime call already
 * started CUDA on the current device). */
void loomrt_init(int *argc, char ***argv);

/* Frees the communicators still alive and finalizes MPI if loomrt_init
 * initialized it. */
void loomrt_finalize(void);

/* Rank and size in MPI_COMM_WORLD (0 and 1 before loomrt_init). */
int32_t loomrt_world_rank(void);
int32_t loomrt_world_size(void);

/* Prints "loomrt: rank R: <message>" on stderr and terminates the whole job
 * (MPI_Abort when MPI is up, abort() otherwise). Never returns. */
void loomrt_abort(const char *message);

/* Number of worker threads for kernels, GEMMs included (set from the thread
 * that makes the runtime calls). n <= 0 restores the default
 * (OMP_NUM_THREADS or the number of cores). The cpu backend has
 * a single pool (OpenMP): it sets OpenBLAS to one thread when loaded and
 * splits GEMMs across its own threads, so the two pools never compete.
 * The cuda backend runs kernels on the GPU and only remembers the value. */
void loomrt_set_num_threads(int32_t n);
int32_t loomrt_get_num_threads(void);

/* 64-byte aligned allocation of `bytes` bytes (bytes == 0 returns a valid
 * unique pointer); aborts on exhaustion. Free with loomrt_free (NULL ok). */
void *loomrt_alloc(int64_t bytes);
void loomrt_free(void *ptr);

/* memcpy / memset(0) of `bytes` bytes (regions must not overlap). Either
 * side of a copy may be host memory, so this is also how data enters and
 * leaves backend memory. On the cuda backend loomrt_copy is cudaMemcpy with
 * cudaMemcpyDefault (the direction follows from the pointers, through
 * unified virtual addressing), so it works for any mix of host and device
 * memory and is complete on return; loomrt_zero and loomrt_copy_2d take
 * device memory. */
void loomrt_copy(void *dst, const void *src, int64_t bytes);
void loomrt_zero(void *dst, int64_t bytes);

/* Host memory src to backend memory dst without waiting for the device:
 * later calls see the data, and src may be reused as soon as the call
 * returns (the cuda backend stages it in pinned host memory and copies on
 * the rank's stream; it waits only when its staging ring is still in use).
 * How a step's batch and loss scale enter without a host sync. */
void loomrt_upload(void *dst, const void *src, int64_t bytes);

/* Strided copy of `rows` rows of row_bytes bytes each, consecutive rows
 * dst_stride / src_stride bytes apart (strides >= row_bytes): slicing and
 * concatenating along the last dimension, e.g. splitting a fused QKV output
 * [M, 3H] into three [M, H] tensors. */
void loomrt_copy_2d(void *dst, int64_t dst_stride, const void *src,
                    int64_t src_stride, int64_t rows, int64_t row_bytes);

/* Seconds on a monotonic clock, for durations only. The cuda backend first
 * waits for the rank's queued GPU work, so durations cover it. */
double loomrt_wtime(void);

/*===----------------------------------------------------------------------===*
 * Casts, elementwise helpers, checks
 *===----------------------------------------------------------------------===*/

/* dst[i] = (dst_dtype) src[i], i < n, round-to-nearest-even; values beyond
 * the f16 range become +-inf, NaN stays NaN. src == dst is allowed only when
 * both dtypes have the same size. */
void loomrt_cast(loomrt_dtype src_dtype, const void *src,
                 loomrt_dtype dst_dtype, void *dst, int64_t n);

/* Returns 1 if any of the n elements is inf or NaN, else 0. */
int32_t loomrt_has_nonfinite(loomrt_dtype dtype, const void *x, int64_t n);

/* x[i] *= alpha in place (gradient clipping, loss (un)scaling). */
void loomrt_scale(loomrt_dtype dtype, void *x, int64_t n, float alpha);

/* y[i] += alpha * x[i]; x and y may have different dtypes (accumulate a
 * bf16 gradient into an f32 main gradient). */
void loomrt_axpy(int64_t n, float alpha, loomrt_dtype x_dtype, const void *x,
                 loomrt_dtype y_dtype, void *y);

/* out[i] = a[i] + b[i] (residual connections); out may alias a or b. */
void loomrt_add(loomrt_dtype dtype, int64_t n, const void *a, const void *b,
                void *out);

/* out[r, j] = x[r, j] + bias[j] for a [rows, n] x and an [n] bias (the
 * bias of a row-parallel linear, added once after the all-reduce); out may
 * alias x. */
void loomrt_add_bias(loomrt_dtype dtype, int64_t rows, int64_t n,
                     const void *x, const void *bias, void *out);

/* *out = *num / *den, or 0 when *den is 0 (a loss over no tokens), all
 * three f32 scalars in backend memory: the loss's mean stays on the device
 * (no host wait). out may alias num or den. */
void loomrt_safe_divide(const float *num, const float *den, float *out);

/* Returns sum(x[i]^2) accumulated in f32 partial sums (per block) and
 * double across blocks: the local part of a gradient norm. */
float loomrt_sum_squares(loomrt_dtype dtype, const void *x, int64_t n);
/* The same added to *acc, an f32 scalar in backend memory, without waiting
 * for the device: a gradient norm over many pieces reads back once. */
void loomrt_sum_squares_add(loomrt_dtype dtype, const void *x, int64_t n,
                            float *acc);

/*===----------------------------------------------------------------------===*
 * GEMM and linear layers
 *===----------------------------------------------------------------------===*/

/* Batched strided row-major GEMM, computed with cblas_sgemm:
 *   for b < batch: C_b = alpha * op(A_b) op(B_b) + beta * C_b
 * op(A_b) is [M,K], op(B_b) is [K,N], C_b is [M,N]; trans_x != 0 means the
 * stored matrix is the transpose ([K,M] for A, [N,K] for B). lda/ldb/ldc are
 * row strides of the *stored* matrices; stride_a/b/c are element strides
 * between batch entries (0 broadcasts one matrix over the batch). With
 * beta == 0, C is not read (NaN in C does not propagate). bf16/f16 operands
 * are widened to f32 buffers first; C is accumulated in f32, rounded once. */
void loomrt_gemm(int32_t trans_a, int32_t trans_b, int64_t M, int64_t N,
                 int64_t K, float alpha, loomrt_dtype a_dtype, const void *A,
                 int64_t lda, int64_t stride_a, loomrt_dtype b_dtype,
                 const void *B, int64_t ldb, int64_t stride_b, float beta,
                 loomrt_dtype c_dtype, void *C, int64_t ldc, int64_t stride_c,
                 int64_t batch);

/* Linear layer, torch/Megatron layout: x [M,K], W [N,K] (out_features,
 * in_features), bias [N] or NULL, y [M,N]:  y = x W^T + bias. */
void loomrt_linear_forward(loomrt_dtype dtype, int64_t M, int64_t N, int64_t K,
                           const void *x, const void *W, const void *bias,
                           void *y);

/* Input gradient: dx [M,K] = dy [M,N] W [N,K] (accumulate: dx += ...). */
void loomrt_linear_backward_data(loomrt_dtype dtype, int64_t M, int64_t N,
                                 int64_t K, const void *dy, const void *W,
                                 void *dx, int32_t accumulate);

/* Parameter gradients: dW [N,K] = dy^T x and, if dbias != NULL,
 * dbias [N] = sum over the M rows of dy. dy and x have dtype `dtype`,
 * dW and dbias have `gdtype`. accumulate != 0 adds into dW/dbias (beta = 1:
 * gradient accumulation over micro-batches). */
void loomrt_linear_backward_weight(loomrt_dtype dtype, int64_t M, int64_t N,
                                   int64_t K, const void *dy, const void *x,
                                   loomrt_dtype gdtype, void *dW, void *dbias,
                                   int32_t accumulate);

/* Linears of one input (attention's q, k and v; a gated MLP's gate and
 * up): for i < count, y[i] [M,N[i]] = x [M,K] W[i]^T + bias[i], each as
 * loomrt_linear_forward computes it. N, W, bias and y are host arrays of
 * count entries (bias NULL: no biases; an entry NULL: none for that one). */
void loomrt_multi_linear_forward(loomrt_dtype dtype, int32_t count, int64_t M,
                                 int64_t K, const int64_t *N, const void *x,
                                 const void *const *W,
                                 const void *const *bias, void *const *y);

/* Their input gradient: dx [M,K] = sum over i of dy[i] [M,N[i]] W[i]
 * (accumulate: dx += ...), summed in the order given, each product added
 * as loomrt_linear_backward_data with accumulate adds it. */
void loomrt_multi_linear_backward_data(loomrt_dtype dtype, int32_t count,
                                       int64_t M, int64_t K, const int64_t *N,
                                       const void *const *dy,
                                       const void *const *W, void *dx,
                                       int32_t accumulate);

/* Their parameter gradients, each as loomrt_linear_backward_weight
 * computes it: dW[i] = dy[i]^T x and, when dbias is not NULL, dbias[i] =
 * the sum of dy[i]'s rows. dy, dW and dbias are host arrays of count
 * entries. */
void loomrt_multi_linear_backward_weight(loomrt_dtype dtype, int32_t count,
                                         int64_t M, int64_t K,
                                         const int64_t *N,
                                         const void *const *dy, const void *x,
                                         loomrt_dtype gdtype,
                                         void *const *dW, void *const *dbias,
                                         int32_t accumulate);

/* A linear layer and the GELU of its output: pre [M,N] = x W^T + bias as
 * loomrt_linear_forward computes it, y = gelu(pre) as loomrt_gelu_forward
 * does (approximate: LOOMRT_GELU_ERF or LOOMRT_GELU_TANH). */
void loomrt_linear_gelu_forward(loomrt_dtype dtype, int32_t approximate,
                                int64_t M, int64_t N, int64_t K,
                                const void *x, const void *W,
                                const void *bias, void *pre, void *y);

/* The input gradient of a linear layer whose input a GELU made from
 * gelu_input [M,K]: dx = gelu'(gelu_input) * (dy [M,N] W [N,K]), what
 * loomrt_linear_backward_data and loomrt_gelu_backward compute. */
void loomrt_linear_backward_data_gelu(loomrt_dtype dtype, int32_t approximate,
                                      int64_t M, int64_t N, int64_t K,
                                      const void *dy, const void *W,
                                      const void *gelu_input, void *dx);

/* A gated MLP's gate and up linears and their SwiGLU: gate, up [M,F] =
 * x [M,K] Wg^T + bg, x Wu^T + bu (Wg, Wu [F,K]; bg, bu [F] or NULL) as
 * loomrt_linear_forward computes them, out [M,F] = silu(gate) * up as
 * loomrt_swiglu_forward does. */
void loomrt_linear_swiglu_forward(loomrt_dtype dtype, int64_t M, int64_t F,
                                  int64_t K, const void *x, const void *Wg,
                                  const void *Wu, const void *bg,
                                  const void *bu, void *gate, void *up,
                                  void *out);

/* The input gradient of a linear layer whose input a SwiGLU made from
 * gate and up [M,F]: dout = dy [M,N] W [N,F] as
 * loomrt_linear_backward_data computes it, then dgate and dup as
 * loomrt_swiglu_backward computes them from dout. */
void loomrt_linear_backward_data_swiglu(loomrt_dtype dtype, int64_t M,
                                        int64_t N, int64_t F, const void *dy,
                                        const void *W, const void *gate,
                                        const void *up, void *dgate,
                                        void *dup);

/*===----------------------------------------------------------------------===*
 * Normalization (over the last dimension, of size H, for `rows` rows)
 *===----------------------------------------------------------------------===*/

/* LayerNorm: y = (x - mean) * rsqrt(var + eps) * w + b, var biased (/H),
 * as torch.nn.functional.layer_norm. x, y [rows,H]; w [H]; b [H] or NULL.
 * Mean and variance are f32 (two passes over the row). */
void loomrt_layer_norm_forward(loomrt_dtype dtype, int64_t rows, int64_t H,
                               const void *x, const void *w, const void *b,
                               float eps, void *y);

/* LayerNorm backward. The row statistics are recomputed from x (one extra
 * pass over x instead of keeping [rows] of state alive between forward and
 * backward). dx [rows,H] (dtype) is overwritten, plus dx_add [rows,H]
 * (dtype; NULL: nothing; it may be dx itself) added in f32 before the one
 * rounding: the residual stream's gradient summed in the same pass; dw [H]
 * and db [H] (gdtype; db may be NULL) are overwritten or accumulated. */
void loomrt_layer_norm_backward(loomrt_dtype dtype, int64_t rows, int64_t H,
                                const void *x, const void *w, const void *dy,
                                float eps, const void *dx_add, void *dx,
                                loomrt_dtype gdtype, void *dw, void *db,
                                int32_t accumulate);

/* A residual add and the norm of its sum in one call: sum [rows,H] =
 * residual + x, rounded to dtype (what loomrt_add writes), and y the
 * layer norm of that sum (b may be NULL), as loomrt_layer_norm_forward
 * computes it from sum. */
void loomrt_add_layer_norm_forward(loomrt_dtype dtype, int64_t rows, int64_t H,
                                   const void *x, const void *residual,
                                   const void *w, const void *b, float eps,
                                   void *sum, void *y);

/* RMSNorm (Llama): y = x * rsqrt(mean(x^2) + eps) * w. */
void loomrt_rms_norm_forward(loomrt_dtype dtype, int64_t rows, int64_t H,
                             const void *x, const void *w, float eps, void *y);

/* The residual add and the RMS norm of its sum, as
 * loomrt_add_layer_norm_forward. */
void loomrt_add_rms_norm_forward(loomrt_dtype dtype, int64_t rows, int64_t H,
                                 const void *x, const void *residual,
                                 const void *w, float eps, void *sum, void *y);

/* RMSNorm backward: dx overwritten (plus dx_add, as LayerNorm's), dw [H]
 * (gdtype) overwritten or accumulated. */
void loomrt_rms_norm_backward(loomrt_dtype dtype, int64_t rows, int64_t H,
                              const void *x, const void *w, const void *dy,
                              float eps, const void *dx_add, void *dx,
                              loomrt_dtype gdtype, void *dw,
                              int32_t accumulate);

/*===----------------------------------------------------------------------===*
 * Rotary position embedding (HF Llama "rotate half" convention)
 *===----------------------------------------------------------------------===*/

/* How the inverse frequencies are rescaled (Hugging Face rope_scaling). */
typedef enum {
  LOOMRT_ROPE_DEFAULT = 0, /* none: factor, low, high, original ignored */
  LOOMRT_ROPE_LLAMA3 = 1   /* "rope_type": "llama3" (Llama 3.1, 3.2) */
} loomrt_rope_scaling;

/* x, y viewed as [B,S,N,D]; pos int32 [B,S] (NULL means pos = s). The first
 * `rot_dim` (even, <= D) features of every head are rotated, the rest are
 * copied (rot_dim == D for Llama). With h = rot_dim/2 and i < h:
 *   inv_freq_i = 1 / theta^(2i/rot_dim),  a = pos * inv_freq_i   (f32)
 *   y[i]   = x[i] cos a - x[i+h] sin a
 *   y[i+h] = x[i+h] cos a + x[i] sin a
 * With scaling LOOMRT_ROPE_LLAMA3, inv_freq_i is first rescaled as
 * transformers' _compute_llama3_parameters does, in f32: with
 * w = 2 pi / inv_freq_i and o = original_max_positions,
 *   w > o / low_freq_factor   -> inv_freq_i / factor
 *   w < o / high_freq_factor  -> inv_freq_i
 *   otherwise, s = (o / w - low_freq_factor) / (high_freq_factor -
 *   low_freq_factor): (1 - s) inv_freq_i / factor + s inv_freq_i.
 * y may alias x (in place). */
void loomrt_rope_forward(loomrt_dtype dtype, int64_t B, int64_t S, int64_t N,
                         int64_t D, int64_t rot_dim, float theta,
                         int32_t scaling, float factor, float low_freq_factor,
                         float high_freq_factor, int64_t original_max_positions,
                         const int32_t *pos, const void *x, void *y);

/* Two rotations at the same positions in one call (q and k): x1 [B,S,N1*D]
 * -> y1 and x2 [B,S,N2*D] -> y2, each as loomrt_rope_forward computes it
 * (loomrt_rope_pair_backward: as loomrt_rope_backward). */
void loomrt_rope_pair_forward(loomrt_dtype dtype, int64_t B, int64_t S,
                              int64_t N1, int64_t N2, int64_t D,
                              int64_t rot_dim, float theta, int32_t scaling,
                              float factor, float low_freq_factor,
                              float high_freq_factor,
                              int64_t original_max_positions,
                              const int32_t *pos, const void *x1,
                              const void *x2, void *y1, void *y2);
void loomrt_rope_pair_backward(loomrt_dtype dtype, int64_t B, int64_t S,
                               int64_t N1, int64_t N2, int64_t D,
                               int64_t rot_dim, float theta, int32_t scaling,
                               float factor, float low_freq_factor,
                               float high_freq_factor,
                               int64_t original_max_positions,
                               const int32_t *pos, const void *dy1,
                               const void *dy2, void *dx1, void *dx2);

/* Backward: dx = rotation of dy by -a (the transpose of the forward). dx may
 * alias dy. */
void loomrt_rope_backward(loomrt_dtype dtype, int64_t B, int64_t S, int64_t N,
                          int64_t D, int64_t rot_dim, float theta,
                          int32_t scaling, float factor, float low_freq_factor,
                          float high_freq_factor,
                          int64_t original_max_positions, const int32_t *pos,
                          const void *dy, void *dx);

/*===----------------------------------------------------------------------===*
 * Attention masks from tokens (Megatron get_ltor_masks_and_position_ids)
 *===----------------------------------------------------------------------===*/

/* doc [B,S] int32: document index of every token. The index increments
 * *after* each `eod` token, so an EOD belongs to the document it ends
 * (reset_attention_mask=True). */
void loomrt_document_ids(int64_t B, int64_t S, const int32_t *tokens,
                         int32_t eod, int32_t *doc);

/* pos [B,S] int32: with reset != 0 positions restart at 0 on the token after
 * each EOD (reset_position_ids=True); otherwise pos = 0..S-1. */
void loomrt_position_ids(int64_t B, int64_t S, const int32_t *tokens,
                         int32_t eod, int32_t reset, int32_t *pos);

/* dst[b,i] = src[b, idx[b,i]] for int32 src [B,S], idx and dst [B,L]: the
 * document ids of a context-parallel rank's tokens, from those of the whole
 * sequence and the tokens' global positions. An index outside [0, S) aborts. */
void loomrt_gather_positions(int64_t B, int64_t S, int64_t L,
                             const int32_t *src, const int32_t *idx,
                             int32_t *dst);

/* pos [B,L] int32: the global sequence positions of a rank's L tokens when
 * the sequence is stored in `num_chunks` chunks of `chunk` tokens, stored
 * chunk j being global chunk order[j] (order NULL: the natural order), and
 * the rank holds stored tokens [start, start + L). Context parallelism's
 * load-balanced layout is order = 0, 2cp-1, 1, 2cp-2, ... */
void loomrt_sequence_positions(int64_t B, int64_t L, int64_t start,
                               int64_t chunk, int32_t num_chunks,
                               const int64_t *order, int32_t *pos);

/*===----------------------------------------------------------------------===*
 * Attention (softmax(q k^T * scale + mask) v, GQA, with log-sum-exp)
 *===----------------------------------------------------------------------===*/

/* q [B,S,Nq*D], k and v [B,Sk,Nkv*D], o [B,S,Nq*D] (dtype); Nq % Nkv == 0
 * and query head h reads kv head h / (Nq/Nkv).
 * Mask: key j is visible from query i iff
 *   (!causal || k_pos[b,j] <= q_pos[b,i]) &&
 *   (q_doc == NULL || q_doc[b,i] == k_doc[b,j])
 * q_pos [B,S] / k_pos [B,Sk] are global sequence positions (NULL means
 * 0..S-1 / 0..Sk-1), so context-parallel chunks reuse this kernel; q_doc and
 * k_doc (both NULL or both given) are document ids (loomrt_document_ids).
 * lse [B,Nq,S] f32 receives the natural-log log-sum-exp over visible keys of
 * the scaled scores. A row without visible keys gets o = 0, lse = -inf.
 * Scores, softmax and the p*v sums are f32. */
void loomrt_attention_forward(loomrt_dtype dtype, int64_t B, int64_t S,
                              int64_t Sk, int64_t Nq, int64_t Nkv, int64_t D,
                              float scale, int32_t causal, const int32_t *q_pos,
                              const int32_t *k_pos, const int32_t *q_doc,
                              const int32_t *k_doc, const void *q,
                              const void *k, const void *v, void *o,
                              float *lse);

/* Merges a partial result over other keys into an accumulator in place (ring
 * attention): with l = log(exp(lse_acc) + exp(lse_part)),
 *   o_acc = o_acc * exp(lse_acc - l) + o_part * exp(lse_part - l),
 *   lse_acc = l.
 * o [B,S,Nq*D] (dtype), lse [B,Nq,S] f32; -inf partials contribute nothing. */
void loomrt_attention_merge(loomrt_dtype dtype, int64_t B, int64_t S,
                            int64_t Nq, int64_t D, void *o_acc, float *lse_acc,
                            const void *o_part, const float *lse_part);

/* Backward by recomputation (flash-attention style): probabilities are
 * rebuilt as exp(score*scale - lse) from the forward's o and lse, so for a
 * ring step pass the *final* (merged) o and lse with one chunk of k/v.
 * Same shapes and mask arguments as the forward; dq like q, dk/dv like k/v.
 * accumulate != 0 adds into dq, dk, dv (ring attention sums chunks);
 * otherwise they are overwritten. Rows with lse = -inf contribute nothing. */
void loomrt_attention_backward(loomrt_dtype dtype, int64_t B, int64_t S,
                               int64_t Sk, int64_t Nq, int64_t Nkv, int64_t D,
                               float scale, int32_t causal,
                               const int32_t *q_pos, const int32_t *k_pos,
                               const int32_t *q_doc, const int32_t *k_doc,
                               const void *q, const void *k, const void *v,
                               const void *o, const float *lse,
                               const void *dout, void *dq, void *dk, void *dv,
                               int32_t accumulate);

/* Ring attention sections of causal context parallelism (TransformerEngine's
 * AttnFuncWithCPAndKVP2P), for Megatron's load-balanced layout: with cp
 * ranks and c = L/2, cp rank r holds the L = 2c tokens [chunk r ; chunk
 * 2cp-1-r] of every sequence (global chunks of c tokens; L must be even).
 * q [B,L,Nq*D] are this rank's queries, k and v [B,L,Nkv*D] the block of
 * cp rank j (GQA as in loomrt_attention_forward), o [B,L,Nq*D] (dtype) and
 * lse [B,Nq,L] f32. `section` says how rank j relates to r (no positions
 * needed):
 *   LOOMRT_SECTION_DIAGONAL j == r: all queries, all keys, causal mask on
 *                           local indices (key i' visible from query i iff
 *                           i' <= i, exact since chunk r < chunk 2cp-1-r);
 *   LOOMRT_SECTION_LOWER    j < r: all queries, only kv half 0 (the block's
 *                           first c keys, chunk j), no mask;
 *   LOOMRT_SECTION_UPPER    j > r: only query half 1 (rows c..2c-1, chunk
 *                           2cp-1-r), all keys, no mask.
 * Pieces of a section that are not listed are fully masked and skipped.
 * q_doc and k_doc [B,L] int32 (both NULL, or both given) are the document
 * ids of this rank's queries and of block j's keys (reset_attention_mask):
 * keys of another document are masked too.
 * All work goes through the other entry points (forward, merge, backward,
 * copies), so these behave the same on every backend. */
#define LOOMRT_SECTION_DIAGONAL 0
#define LOOMRT_SECTION_LOWER 1
#define LOOMRT_SECTION_UPPER 2

/* Computes the tile (o normalized within it, its lse) and merges it into the
 * accumulators in place exactly as loomrt_attention_merge does; rows outside
 * the section (half 0 for UPPER) are left untouched. Start a ring from
 * o_acc = 0, lse_acc = -inf (or from the DIAGONAL tile's plain forward with
 * causal = 1) and merge one section per cp rank j, in any order. The tile
 * lives in temporary backend memory (loomrt_alloc), so on the cuda backend
 * the call waits for the rank's queued work as loomrt_free does. */
void loomrt_attention_section_forward(loomrt_dtype dtype, int64_t B, int64_t L,
                                      int64_t Nq, int64_t Nkv, int64_t D,
                                      float scale, int32_t section,
                                      const int32_t *q_doc,
                                      const int32_t *k_doc,
                                      const void *q, const void *k,
                                      const void *v, void *o_acc,
                                      float *lse_acc);

/* Adds the tile's gradients (always accumulates: zero the buffers before the
 * first tile): dq (all rows; half 1 only for UPPER) and dk, dv of rank j's
 * block (half 0 only for LOWER). o and lse are the FINAL (merged) results
 * of this rank's queries, dout the gradient of o, all [B,L,...] as above;
 * the sum over every j of r's tiles gives r's dq, and the sum over every r
 * of the tiles with block j gives j's dk, dv. UPPER copies the half-1 lse
 * rows to temporary memory (and so waits like the forward); DIAGONAL and
 * LOWER need none. */
void loomrt_attention_section_backward(loomrt_dtype dtype, int64_t B, int64_t L,
                                       int64_t Nq, int64_t Nkv, int64_t D,
                                       float scale, int32_t section,
                                       const int32_t *q_doc,
                                       const int32_t *k_doc,
                                       const void *q, const void *k,
                                       const void *v, const void *o,
                                       const float *lse, const void *dout,
                                       void *dq, void *dk, void *dv);

/* Causal attention of a context-parallel rank's queries on the whole
 * sequence's keys: the all-gather scheme (TransformerEngine's
 * AttnFuncWithCPAndKVAllGather). The sequence of S = num_chunks * chunk
 * tokens is stored in num_chunks chunks, stored chunk j being global chunk
 * order[j] (order NULL: the natural order; host memory), as in
 * loomrt_sequence_positions. q [B,L,Nq*D] holds the rank's stored tokens
 * [start, start + L), whole chunks (start and L multiples of chunk); k and
 * v [B,S,Nkv*D] hold the whole sequence in natural order (GQA as in
 * loomrt_attention_forward). The result is loomrt_attention_forward's with
 * causal = 1 and the tokens' global positions: a query chunk that is global
 * chunk g sees keys [0, g chunk) whole and keys [g chunk, (g+1) chunk)
 * causally. Each piece is one loomrt_attention_forward call without
 * positions (on the cuda backend, cuDNN's fused attention) and the two are
 * merged. q_doc [B,L] and k_doc [B,S] int32 (both NULL, or both given) are
 * the document ids of the rank's queries and of the whole sequence. o
 * [B,L,Nq*D] (dtype) and lse [B,Nq,L] f32 are overwritten. The per-chunk
 * temporaries live in backend memory (loomrt_alloc), so on the cuda backend
 * the call waits for the rank's queued work as loomrt_free does. */
void loomrt_attention_chunked_forward(loomrt_dtype dtype, int64_t B, int64_t L,
                                      int64_t start, int64_t chunk,
                                      int32_t num_chunks, const int64_t *order,
                                      int64_t Nq, int64_t Nkv, int64_t D,
                                      float scale, const int32_t *q_doc,
                                      const int32_t *k_doc, const void *q,
                                      const void *k, const void *v, void *o,
                                      float *lse);

/* Its gradients from the forward's o and lse (same layout arguments): dq
 * [B,L,Nq*D] and dk, dv [B,S,Nkv*D] are overwritten; keys no query of the
 * rank sees get zero gradients. */
void loomrt_attention_chunked_backward(
    loomrt_dtype dtype, int64_t B, int64_t L, int64_t start, int64_t chunk,
    int32_t num_chunks, const int64_t *order, int64_t Nq, int64_t Nkv,
    int64_t D, float scale, const int32_t *q_doc, const int32_t *k_doc,
    const void *q, const void *k, const void *v, const void *o,
    const float *lse, const void *dout, void *dq, void *dk, void *dv);

/*===----------------------------------------------------------------------===*
 * Activations (elementwise, n elements)
 *===----------------------------------------------------------------------===*/

#define LOOMRT_GELU_ERF 0  /* 0.5 x (1 + erf(x / sqrt 2)) */
#define LOOMRT_GELU_TANH 1 /* 0.5x (1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) */

void loomrt_gelu_forward(loomrt_dtype dtype, int32_t approximate, int64_t n,
                         const void *x, void *y);
/* dx = dy * gelu'(x); dx may alias dy. */
void loomrt_gelu_backward(loomrt_dtype dtype, int32_t approximate, int64_t n,
                          const void *x, const void *dy, void *dx);

/* silu(x) = x * sigmoid(x). */
void loomrt_silu_forward(loomrt_dtype dtype, int64_t n, const void *x,
                         void *y);
void loomrt_silu_backward(loomrt_dtype dtype, int64_t n, const void *x,
                          const void *dy, void *dx);

/* SwiGLU over [rows, F]: out = silu(gate) * up, out [rows,F] contiguous.
 * gate and up are read with row stride in_ld (>= F): in_ld = F for two
 * separate tensors, in_ld = 2F with up = gate + F for Megatron's fused
 * [rows, 2F] fc1 output (gate first). */
void loomrt_swiglu_forward(loomrt_dtype dtype, int64_t rows, int64_t F,
                           int64_t in_ld, const void *gate, const void *up,
                           void *out);
/* dgate/dup are written with the same row stride in_ld as gate/up; with
 * in_ld = F, dout may be dgate (each element is read before written). */
void loomrt_swiglu_backward(loomrt_dtype dtype, int64_t rows, int64_t F,
                            int64_t in_ld, const void *gate, const void *up,
                            const void *dout, void *dgate, void *dup);

/*===----------------------------------------------------------------------===*
 * Dropout (counter-based, sharding-invariant)
 *===----------------------------------------------------------------------===*/

/* y = x * keep / (1 - p) over a [rows, cols] view. The keep decision of an
 * element is a pure function of (seed, g) where g = offset + r*row_stride + c
 * is its index in the *global* (unsharded) tensor: Philox4x32-10 keyed by
 * seed on counter g/4, word g%4, keep iff u >= p with u uniform in [0,1).
 * So forward and backward regenerate the same mask, and every sharding of
 * the tensor drops the same global elements. Examples: contiguous n
 * elements: rows=1, cols=n; [S,H] split on H at h0 with global width Hg:
 * offset=h0, row_stride=Hg. p == 0 copies; p == 1 zeros. y may alias x. */
void loomrt_dropout_forward(loomrt_dtype dtype, int64_t rows, int64_t cols,
                            const void *x, void *y, float p, uint64_t seed,
                            int64_t offset, int64_t row_stride);
/* dx = dy * keep / (1 - p) with the same mask (same arguments as forward). */
void loomrt_dropout_backward(loomrt_dtype dtype, int64_t rows, int64_t cols,
                             const void *dy, void *dx, float p, uint64_t seed,
                             int64_t offset, int64_t row_stride);

/*===----------------------------------------------------------------------===*
 * Embedding (vocab-parallel)
 *===----------------------------------------------------------------------===*/

/* out [n,H] = table[ids[i] - vocab_start] for vocab_start <= ids[i] <
 * vocab_end, zero rows otherwise (Megatron VocabParallelEmbedding: the
 * all-reduce over the TP group completes the lookup). table is
 * [vocab_end - vocab_start, H]. */
void loomrt_embedding_forward(loomrt_dtype dtype, int64_t n, int64_t H,
                              const int32_t *ids, int64_t vocab_start,
                              int64_t vocab_end, const void *table, void *out);

/* dtable[ids[i] - vocab_start] += dout[i] for ids in range (scatter-add,
 * deterministic). dtable (gdtype) is zeroed first unless accumulate. */
void loomrt_embedding_backward(loomrt_dtype dtype, int64_t n, int64_t H,
                               const int32_t *ids, int64_t vocab_start,
                               int64_t vocab_end, const void *dout,
                               loomrt_dtype gdtype, void *dtable,
                               int32_t accumulate);

/*===----------------------------------------------------------------------===*
 * Cross-entropy over logits [n, V]
 *===----------------------------------------------------------------------===*/

/* Full-vocabulary loss: with lse_i = logsumexp(logits[i,:]),
 *   *loss = sum_i mask_i (lse_i - logits[i,labels_i]) / sum_i mask_i.
 * labels int32 [n] in [0,V); mask f32 [n] or NULL (all ones). A zero mask
 * sum gives loss 0. row_loss f32 [n] (lse_i - target_i, unmasked) may be
 * NULL. */
void loomrt_cross_entropy_forward(loomrt_dtype dtype, int64_t n, int64_t V,
                                  const void *logits, const int32_t *labels,
                                  const float *mask, float *loss,
                                  float *row_loss);

/* dlogits = (softmax(logits) - onehot(labels)) * mask_i / sum(mask) * dloss
 * (all zero if sum(mask) == 0). dlogits may alias logits. */
void loomrt_cross_entropy_backward(loomrt_dtype dtype, int64_t n, int64_t V,
                                   const void *logits, const int32_t *labels,
                                   const float *mask, float dloss,
                                   void *dlogits);

/* Vocab-parallel pieces (Megatron _VocabParallelCrossEntropy). This rank
 * holds logits [n, Vl] for vocabulary ids [vocab_start, vocab_start + Vl).
 * The compiler runs:
 *   local_max -> all_reduce(max) -> local_sum_exp(max) -> all_reduce(sum),
 *   local_target -> all_reduce(sum), then loss_from_parts.
 * Only the first `valid` columns (0 <= valid <= Vl) are vocabulary: the
 * others are padding (a vocabulary padded to a multiple of the tp size),
 * left out of the softmax and given zero gradient; valid = Vl for none.
 * row_max[i] = max_{j<valid} logits[i,j] (-inf when valid = 0). */
void loomrt_ce_local_max(loomrt_dtype dtype, int64_t n, int64_t Vl,
                         int64_t valid, const void *logits, float *row_max);
/* sum_exp[i] = sum_{j<valid} exp(logits[i,j] - row_max[i]) (row_max: the
 * global max). */
void loomrt_ce_local_sum_exp(loomrt_dtype dtype, int64_t n, int64_t Vl,
                             int64_t valid, const void *logits,
                             const float *row_max, float *sum_exp);
/* target[i] = logits[i, labels[i] - vocab_start] if the label is local,
 * else 0 (so the sum over ranks is the target logit). */
void loomrt_ce_local_target(loomrt_dtype dtype, int64_t n, int64_t Vl,
                            const void *logits, const int32_t *labels,
                            int64_t vocab_start, float *target);
/* From the reduced parts: row_loss[i] = log(sum_exp[i]) + row_max[i] -
 * target[i] (row_loss may be NULL); *masked_sum = sum_i mask_i row_loss[i];
 * *mask_sum = sum_i mask_i (mask NULL = ones). The loss is
 * masked_sum / mask_sum after those are reduced over the ranks that split
 * the batch or sequence (DP, CP), which is why they are returned apart. */
void loomrt_ce_loss_from_parts(int64_t n, const float *row_max,
                               const float *sum_exp, const float *target,
                               const float *mask, float *row_loss,
                               float *masked_sum, float *mask_sum);
/* Backward of the vocab-parallel form on the local shard, for j < valid:
 *   dlogits[i,j] = (exp(logits[i,j] - row_max[i]) / sum_exp[i]
 *                   - [labels[i] == vocab_start + j]) * mask_i * grad_scale
 * and 0 for the padding columns j >= valid, where the caller passes
 * *grad_scale = dloss / (global) sum(mask), one f32 in backend memory
 * (computed there by loomrt_safe_divide: no host wait). */
/* *sum = sum_i mask[i] over n elements (the loss's token count). */
void loomrt_mask_sum(int64_t n, const float *mask, float *sum);
void loomrt_ce_vocab_parallel_backward(loomrt_dtype dtype, int64_t n,
                                       int64_t Vl, int64_t valid,
                                       const void *logits,
                                       const int32_t *labels,
                                       int64_t vocab_start,
                                       const float *row_max,
                                       const float *sum_exp, const float *mask,
                                       const float *grad_scale, void *dlogits);

/*===----------------------------------------------------------------------===*
 * Mixture of experts
 *===----------------------------------------------------------------------===*/

/* T tokens, each routed to k of E experts (k <= E). The router's tensors are
 * f32 whatever the model's dtype: logits [T,E], probs [T,k]; experts [T,k]
 * int32 holds each token's experts by descending score (ties: the lower
 * expert first).
 *   pre_softmax = 0 (Megatron's default; Mixtral's routing): experts are the
 *     k largest logits, probs the softmax over those k logits (the same as
 *     softmax over all E, top-k, renormalized).
 *   pre_softmax = 1: scores = softmax over all E logits; experts are the k
 *     largest scores and probs those scores, not renormalized (Qwen2-MoE
 *     without norm_topk_prob; Megatron's --moe-router-pre-softmax). */
void loomrt_moe_route_forward(int64_t T, int64_t E, int64_t k,
                              int32_t pre_softmax, const float *logits,
                              float *probs, int32_t *experts);
/* dlogits [T,E] (overwritten) from dprobs [T,k], through the same softmax;
 * the choice of experts has no gradient. */
void loomrt_moe_route_backward(int64_t T, int64_t E, int64_t k,
                               int32_t pre_softmax, const float *logits,
                               const int32_t *experts, const float *dprobs,
                               float *dlogits);

/* counts [E] (f32, overwritten): how many of the T*k (token, slot) pairs of
 * experts [T,k] chose each expert. f32 so that the counts of tokens split
 * over ranks sum with an ordinary all-reduce (exact below 2^24). */
void loomrt_moe_route_counts(int64_t T, int64_t E, int64_t k,
                             const int32_t *experts, float *counts);
/* Megatron-Core's router losses, each one f32 scalar in backend memory, the
 * coefficient applied, from this rank's T tokens and the counts [E] (f32) of
 * the whole micro-batch (tfm.moe_route_counts, summed over the ranks its
 * tokens are split over), N = sum_e counts[e] / k its tokens:
 *   aux_loss = aux_coeff * E / (k * N^2) * sum_e P[e] * counts[e], with
 *     P[e] = sum_t softmax(logits[t])[e] (the load-balancing loss);
 *   z_loss = z_coeff / N * sum_t logsumexp(logits[t])^2.
 * With T = N these are the micro-batch's losses; otherwise this rank's share
 * of them (the shares sum to them). */
void loomrt_moe_router_loss_forward(int64_t T, int64_t E, int64_t k,
                                    float aux_coeff, float z_coeff,
                                    const float *logits, const float *counts,
                                    float *aux_loss, float *z_loss);
/* dlogits [T,E] (overwritten) = grad_scale * d(aux_loss + z_loss)/dlogits,
 * grad_scale an f32 scalar in backend memory (the training step's scale of
 * the loss: the losses join the objective without flowing forward, as
 * Megatron's MoEAuxLossAutoScaler attaches them). */
void loomrt_moe_router_loss_backward(int64_t T, int64_t E, int64_t k,
                                     float aux_coeff, float z_coeff,
                                     const float *logits, const float *counts,
                                     const float *grad_scale, float *dlogits);

/* Capacity (Megatron's --moe-expert-capacity-factor): each expert keeps at
 * most `capacity` of the T*k pairs (token t, slot j) routed to it; the
 * others are dropped. kept [T,k] (int32) is experts [T,k] with -1 for a
 * dropped pair. policy 0 ("probs", Megatron's default) keeps an expert's
 * pairs of largest probs [T,k] (f32; ties: the earlier pair), policy 1
 * ("position") its first pairs in (token, slot) order. */
void loomrt_moe_drop(int64_t T, int64_t E, int64_t k, int64_t capacity,
                     int32_t policy, const float *probs,
                     const int32_t *experts, int32_t *kept);

/* Token dispatch order: the T*k pairs (token t, slot j) sorted by expert,
 * then token, then slot (a stable counting sort of experts); a pair whose
 * expert is -1 (dropped) has no row. rows [N,H] holds x[t] once per pair
 * in that order, from row 0 (N >= the pairs kept; rows past them are
 * zero); counts [E] (int32) the rows of each expert; row_map [T,k] (int32)
 * the row of pair (t, j), -1 for a dropped pair. pad_to > 0 pads every
 * expert's group with zero rows to pad_to rows (N = E * pad_to, every
 * count pad_to; Megatron's --moe-pad-expert-input-to-capacity). */
void loomrt_moe_permute(loomrt_dtype dtype, int64_t T, int64_t H, int64_t k,
                        int64_t E, int64_t N, int64_t pad_to, const void *x,
                        const int32_t *experts, void *rows, int32_t *counts,
                        int32_t *row_map);
/* dx [T,H] (overwritten): dx[t] = sum_j drows[row_map[t,j]], in f32 (pairs
 * whose row is -1 add nothing). */
void loomrt_moe_permute_backward(loomrt_dtype dtype, int64_t T, int64_t H,
                                 int64_t k, const void *drows,
                                 const int32_t *row_map, void *dx);
/* Combine: out[t] = sum_j probs[t,j] * rows[row_map[t,j]] for out [T,H],
 * summed in f32 and rounded once (pairs whose row is -1 add nothing). */
void loomrt_moe_unpermute(loomrt_dtype dtype, int64_t T, int64_t H, int64_t k,
                          const void *rows, const float *probs,
                          const int32_t *row_map, void *out);
/* drows [N,H] (overwritten; rows no pair maps to are zero):
 * drows[row_map[t,j]] = probs[t,j] * dout[t]; dprobs [T,k] (f32):
 * dprobs[t,j] = <dout[t], rows[row_map[t,j]]>, 0 for a dropped pair. */
void loomrt_moe_unpermute_backward(loomrt_dtype dtype, int64_t T, int64_t H,
                                   int64_t k, int64_t N, const void *rows,
                                   const float *probs, const int32_t *row_map,
                                   const void *dout, void *drows,
                                   float *dprobs);

/* Grouped linear layer over E experts: the M rows of x [M,K] are E
 * consecutive groups of counts[0], ..., counts[E-1] rows (counts int32 in
 * backend memory, read by the kernels: no host sync; sum <= M); group e is
 * multiplied by its expert's weight W[e] [N,K] of W [E,N,K]:
 * y_e = x_e W[e]^T, y [M,N]. Rows past the groups are zero in y. */
void loomrt_grouped_linear_forward(loomrt_dtype dtype, int64_t M, int64_t N,
                                   int64_t K, int64_t E, const void *x,
                                   const void *W, const int32_t *counts,
                                   void *y);
/* dx [M,K] (overwritten) = dy_e W[e] per group; rows past the groups zero. */
void loomrt_grouped_linear_backward_data(loomrt_dtype dtype, int64_t M,
                                         int64_t N, int64_t K, int64_t E,
                                         const void *dy, const void *W,
                                         const int32_t *counts, void *dx);
/* dW[e] [N,K] = dy_e^T x_e (gdtype; an expert with no rows gets zero, or
 * keeps its value with accumulate != 0). */
void loomrt_grouped_linear_backward_weight(loomrt_dtype dtype, int64_t M,
                                           int64_t N, int64_t K, int64_t E,
                                           const void *dy, const void *x,
                                           const int32_t *counts,
                                           loomrt_dtype gdtype, void *dW,
                                           int32_t accumulate);

/* Sigmoid gate of a shared expert (Qwen2-MoE): out[r,:] = sigmoid(gate[r]) *
 * x[r,:] over rows rows of H; gate [rows] has the dtype of x. */
void loomrt_sigmoid_gate_forward(loomrt_dtype dtype, int64_t rows, int64_t H,
                                 const void *x, const void *gate, void *out);
/* dx = sigmoid(gate) * dout; dgate[r] = sigmoid'(gate[r]) * <dout[r], x[r]>. */
void loomrt_sigmoid_gate_backward(loomrt_dtype dtype, int64_t rows, int64_t H,
                                  const void *x, const void *gate,
                                  const void *dout, void *dx, void *dgate);

/* Values the compiled step accumulates for the rank program to log (the
 * routers' load-balancing and z losses, without their coefficients): an
 * array of LOOMRT_NUM_METRICS f32 accumulators in backend memory, zero when
 * first asked for. The step adds to a slot with loomrt_axpy; the rank
 * program sums them over ranks, reads and zeroes them after each step. */
#define LOOMRT_METRIC_LOAD_BALANCING 0
#define LOOMRT_METRIC_Z_LOSS 1
#define LOOMRT_NUM_METRICS 2
float *loomrt_metrics(void);

/*===----------------------------------------------------------------------===*
 * Optimizer
 *===----------------------------------------------------------------------===*/

/* One AdamW step (torch.optim.AdamW, decoupled weight decay) on f32 main
 * parameters, for n elements; step is 1-based:
 *   p -= lr*wd*p; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
 *   p -= lr/(1-b1^step) * m / (sqrt(v)/sqrt(1-b2^step) + eps).
 * grad_sumsq (NULL: none) is an f32 scalar in backend memory, the sum of
 * squares of the whole gradient (every rank's part): when it is not finite
 * the step changes nothing (a non-finite gradient, Megatron's skipped
 * iteration), and with max_norm > 0 the step takes g times Megatron's clip
 * coefficient min(1, max_norm / (sqrt(grad_sumsq) + 1e-6)), computed in
 * double and rounded to f32. Both are read on the device: no host wait. */
void loomrt_adamw(int64_t n, float *param, const float *grad, float *exp_avg,
                  float *exp_avg_sq, float lr, float beta1, float beta2,
                  float eps, float weight_decay, int64_t step,
                  const float *grad_sumsq, float max_norm);

/* One tensor of loomrt_adamw_multi: n elements of f32 main parameters,
 * their gradient and moments (backend memory, as loomrt_adamw's), the
 * tensor's weight decay, and model (NULL: none), n elements of backend
 * memory that receive the updated parameters cast to the call's
 * model_dtype (the model's bf16/f16 copy). */
typedef struct loomrt_adamw_tensor {
  int64_t n;
  float *param;
  const float *grad;
  float *exp_avg;
  float *exp_avg_sq;
  void *model;
  float weight_decay;
} loomrt_adamw_tensor;

/* loomrt_adamw on each of count tensors, listed in the host array tensors,
 * with the shared scalars of loomrt_adamw (one skip and clip decision for
 * all), each followed by loomrt_cast(LOOMRT_F32, param, model_dtype, model,
 * n) where model is not NULL: every tensor ends bitwise as those two calls
 * leave it, and a skipped step writes nothing. The tensors must not
 * overlap. One call replaces two per parameter (a handful of kernel
 * launches on cuda: apex's multi-tensor apply); the table is read during
 * the call only. */
void loomrt_adamw_multi(int64_t count, const loomrt_adamw_tensor *tensors,
                        loomrt_dtype model_dtype, float lr, float beta1,
                        float beta2, float eps, int64_t step,
                        const float *grad_sumsq, float max_norm);

/*===----------------------------------------------------------------------===*
 * Communication (MPI on the cpu backend, NCCL on cuda)
 *===----------------------------------------------------------------------===*/

/* A process group. Opaque; NULL stands for "this rank is in no group". */
typedef struct loomrt_comm_impl *loomrt_comm;

/* The group of all ranks (valid between loomrt_init and loomrt_finalize). */
loomrt_comm loomrt_comm_world(void);

/* Creates one communicator per group from an explicit partition: groups are
 * given as num_groups lists, list g being group_ranks[off_g .. off_g +
 * group_sizes[g]) with off_g = sum of the previous sizes; ranks are
 * MPI_COMM_WORLD ranks. Collective over MPI_COMM_WORLD: every rank passes
 * the same lists (the rank generator's output for one dimension). Returns
 * the communicator of the group that contains the calling rank, whose rank
 * order is the order of the list, or NULL if no list contains it. A rank
 * listed twice aborts. Implemented with MPI_Comm_split(color = group index,
 * key = position in the list). */
loomrt_comm loomrt_comm_create(int32_t num_groups, const int32_t *group_sizes,
                               const int32_t *group_ranks);
void loomrt_comm_destroy(loomrt_comm comm);
int32_t loomrt_comm_rank(loomrt_comm comm);
int32_t loomrt_comm_size(loomrt_comm comm);
/* World rank of the member with group rank r (for messages and logs). */
int32_t loomrt_comm_world_rank_of(loomrt_comm comm, int32_t r);

#define LOOMRT_SUM 0
#define LOOMRT_MAX 1

/* All collectives are blocking, have to be called by every member of comm
 * in the same order, and reduce in f32 (bf16/f16 data are widened, reduced
 * and rounded back). One call moves at most INT_MAX elements per rank (MPI's
 * count type); larger requests abort with a message.
 * On the cuda backend "blocking" means ordered: the collective is queued on
 * the communication stream after the kernels that produced its input, and
 * every later runtime call of the rank sees its result; the host does not
 * wait. Each communicator is an NCCL communicator created from an
 * ncclUniqueId that group rank 0 broadcasts over the group's MPI
 * communicator. */

/* recv[i] = op over ranks of send[i], n elements; send == recv is in place. */
void loomrt_all_reduce(loomrt_comm comm, loomrt_dtype dtype, int32_t op,
                       const void *send, void *recv, int64_t n);

/* Broadcast of a contiguous buffer of n elements from group rank root. */
void loomrt_broadcast(loomrt_comm comm, loomrt_dtype dtype, void *buf,
                      int64_t n, int32_t root);

/* Collectives along one dimension of a row-major tensor of rank `ndim`
 * (1..8) whose shape is shape[0..ndim). `dim` is the dimension that is
 * gathered / scattered; P = loomrt_comm_size(comm); group rank r owns the
 * r-th equal slice of that dimension. dim 0 needs no repacking; other dims
 * are packed into contiguous per-rank blocks and back. */

/* send has shape `shape` (the local slice); recv has shape[dim] * P along
 * dim, slices concatenated in group rank order. */
void loomrt_all_gather(loomrt_comm comm, loomrt_dtype dtype, int32_t ndim,
                       const int64_t *shape, int32_t dim, const void *send,
                       void *recv);

/* send has shape `shape` (full, shape[dim] % P == 0); recv is slice r of
 * the element-wise sum over ranks (shape[dim] / P along dim). */
void loomrt_reduce_scatter(loomrt_comm comm, loomrt_dtype dtype, int32_t ndim,
                           const int64_t *shape, int32_t dim, const void *send,
                           void *recv);

/* send has shape `shape`; it is split into P equal slices along split_dim,
 * slice r going to group rank r; the P received slices are concatenated in
 * group rank order along concat_dim. recv therefore has shape `shape` with
 * shape[split_dim] / P and then shape[concat_dim] * P (split_dim ==
 * concat_dim is the plain MPI_Alltoall). Used by Ulysses-style context
 * parallel (split heads, gather sequence) and expert dispatch. */
void loomrt_all_to_all(loomrt_comm comm, loomrt_dtype dtype, int32_t ndim,
                       const int64_t *shape, int32_t split_dim,
                       int32_t concat_dim, const void *send, void *recv);

/* Expert parallelism (Megatron's all-to-all token dispatcher) over the P
 * ranks of comm, each holding E/P experts (group rank r: experts r*E/P ..
 * (r+1)*E/P-1). all_counts [P*E] (int32) holds every rank's rows per expert
 * (the loomrt_all_gather of the counts loomrt_moe_permute returned, group
 * rank order). Dispatch: this rank's rows [N,H], grouped by expert, go to
 * the ranks of their experts; dispatched [M,H] receives the rows of this
 * rank's experts grouped by local expert, then by source rank (what
 * loomrt_grouped_linear_forward takes), zero past them; local_counts
 * [E/P] (int32) its experts' rows. M must hold them: P*N is the dropless
 * bound. Combine is the inverse: dispatched rows [M,H] laid out so return
 * to the rows [N,H] of the ranks they came from (zero past the rank's
 * counts). One grouped p2p exchange each; both read all_counts on the host
 * (on the cuda backend a wait for the device: one per call). */
void loomrt_moe_dispatch(loomrt_comm comm, loomrt_dtype dtype, int64_t E,
                         int64_t N, int64_t H, int64_t M,
                         const int32_t *all_counts, const void *rows,
                         void *dispatched, int32_t *local_counts);
void loomrt_moe_combine(loomrt_comm comm, loomrt_dtype dtype, int64_t E,
                        int64_t N, int64_t H, int64_t M,
                        const int32_t *all_counts, const void *dispatched,
                        void *rows);
/* The same exchanges as Megatron's allgather token dispatcher moves them,
 * through gathered [P*N,H], a buffer the caller provides: the dispatch
 * all-gathers every rank's rows [N,H] into it and copies out those of this
 * rank's experts (loomrt_moe_take_expert_rows); the combine puts the
 * dispatched rows back at their places in a zeroed gathered buffer
 * (loomrt_moe_put_expert_rows) and reduce-scatters it (sum) into each
 * rank's rows. The results equal loomrt_moe_dispatch's and
 * loomrt_moe_combine's exactly (each row has one nonzero contributor).
 * Neither reads the counts on the host: every size is static, so the
 * allgather dispatcher has no host wait on any backend. */
void loomrt_moe_dispatch_allgather(loomrt_comm comm, loomrt_dtype dtype,
                                   int64_t E, int64_t N, int64_t H, int64_t M,
                                   const int32_t *all_counts, const void *rows,
                                   void *gathered, void *dispatched,
                                   int32_t *local_counts);
void loomrt_moe_combine_allgather(loomrt_comm comm, loomrt_dtype dtype,
                                  int64_t E, int64_t N, int64_t H, int64_t M,
                                  const int32_t *all_counts,
                                  const void *dispatched, void *gathered,
                                  void *rows);
/* The rows of group rank r's experts (of E over P ranks, E/P each) in
 * gathered [P*N,H] (rank s's rows at row s*N, grouped by expert with
 * all_counts[s*E + e] rows for expert e): dispatched [M,H] receives them
 * grouped by local expert, then source rank, zero past them, and
 * local_counts [E/P] (int32) their number per local expert. all_counts
 * [P*E] (int32) is read where it lies, in backend memory. */
void loomrt_moe_take_expert_rows(loomrt_dtype dtype, int64_t P, int64_t r,
                                 int64_t E, int64_t N, int64_t H, int64_t M,
                                 const int32_t *all_counts,
                                 const void *gathered, void *dispatched,
                                 int32_t *local_counts);
/* The inverse: gathered [P*N,H] (overwritten) is zero but for the rows of
 * rank r's experts, copied back from dispatched [M,H] to their places. */
void loomrt_moe_put_expert_rows(loomrt_dtype dtype, int64_t P, int64_t r,
                                int64_t E, int64_t N, int64_t H, int64_t M,
                                const int32_t *all_counts,
                                const void *dispatched, void *gathered);

/* Grouped point-to-point (pipeline stages, ring attention):
 *   loomrt_p2p_begin(comm); loomrt_send(..); loomrt_recv(..); ...
 *   loomrt_p2p_end(comm);
 * send/recv between begin and end only record the operation; end issues the
 * whole batch as nonblocking MPI_Isend/MPI_Irecv and waits for all of them
 * (MPI_Waitall), so a batch that exchanges with both neighbours cannot
 * deadlock whatever the peers' order. The posting order follows seed 003
 * section 5.3 all the same: even group ranks post their sends first, odd
 * ranks their recvs first (the order the NCCL backend needs on one stream).
 * Within a batch the k-th send from A to B matches the k-th recv of B from
 * A (MPI's non-overtaking rule); buffers must stay untouched until
 * p2p_end returns. Peers are group ranks. A send or recv outside a batch
 * runs immediately as a batch of one. Batches do not nest. On the cuda
 * backend a batch is one ncclGroupStart/ncclGroupEnd in the same order;
 * NCCL cannot detect a recv whose size differs from the matching send, so
 * the schedule must match exactly (the cpu backend aborts on it). */
void loomrt_p2p_begin(loomrt_comm comm);
void loomrt_send(loomrt_comm comm, loomrt_dtype dtype, const void *buf,
                 int64_t n, int32_t peer);
void loomrt_recv(loomrt_comm comm, loomrt_dtype dtype, void *buf, int64_t n,
                 int32_t peer);
void loomrt_p2p_end(loomrt_comm comm);

/* Pipeline schedule tracing: a compiled pipelined step calls
 * loomrt_pipeline_step before each forward (forward = 1) or backward step
 * of a micro-batch on a model chunk; after loomrt_set_trace(1) the rank
 * prints "loom-trace: rank R F<microbatch>.<chunk>" (or B...) to stderr.
 * Off by default: then the call does nothing. */
void loomrt_set_trace(int32_t on);
void loomrt_pipeline_step(int32_t forward, int64_t microbatch, int64_t chunk);

/* Pipeline data tracing: which micro-batch a step computed. A compiled
 * pipelined step calls loomrt_pipeline_tokens with the token ids the first
 * stage's forward step of a micro-batch reads (n int32 ids, this rank's
 * piece of the micro-batch: [B, S/cp] with context parallelism), and
 * loomrt_pipeline_loss with the loss the last stage's forward step computed
 * (one element of `dtype`). With tracing on the rank prints
 *   "loom-trace: rank R D<microbatch>.<chunk> tokens <checksum>"
 * with checksum = sum over i of (i + 1) * tokens[i] (row-major, int64), or
 *   "loom-trace: rank R D<microbatch>.<chunk> loss <value>"  (%.9e)
 * after the step's own line. Off by default: then the calls do nothing. */
void loomrt_pipeline_tokens(int64_t microbatch, int64_t chunk,
                            const int32_t *tokens, int64_t n);
void loomrt_pipeline_loss(int64_t microbatch, int64_t chunk, loomrt_dtype dtype,
                          const void *loss);

/* Overlapped gradient reduction: a compiled pipelined step calls
 * loomrt_grads_ready(chunk) right after its last backward step of model
 * chunk `chunk`, when the gradients that chunk yields are final in the
 * step's out-params. The rank program's hook (set with
 * loomrt_set_grads_ready_hook; none by default) starts their data-parallel
 * reduction while the rest of the schedule runs. With tracing on the rank
 * prints "loom-trace: rank R G<chunk>". */
typedef void (*loomrt_grads_ready_fn)(void *context, int64_t chunk);
void loomrt_set_grads_ready_hook(loomrt_grads_ready_fn hook, void *context);
void loomrt_grads_ready(int64_t chunk);

/* Nonblocking f32 sums for the overlapped gradient reduction: each call
 * issues the collective and returns at once; loomrt_wait(request)
 * completes it and frees the request: on cpu the call blocks (under the
 * watchdog), on cuda the rank's later work waits for it (the reduction runs
 * on a stream of its own). Buffers must stay untouched until then. Members issue them in the same order, as
 * every collective.
 *   loomrt_all_reduce_start: buf[0..n) summed over comm, in place.
 *   loomrt_reduce_scatter_start: send holds sum(counts) elements; member k
 *     receives the sum of its counts[k] elements (after those of members
 *     0..k-1) in recv. Counts may differ and be 0. */
typedef struct loomrt_request_impl *loomrt_request;
loomrt_request loomrt_all_reduce_start(loomrt_comm comm, float *buf,
                                       int64_t n);
loomrt_request loomrt_reduce_scatter_start(loomrt_comm comm, const float *send,
                                           float *recv, const int64_t *counts);
void loomrt_wait(loomrt_request request);

/* Blocks until every member of comm has called it. */
void loomrt_barrier(loomrt_comm comm);

/* Megatron's --distributed-timeout-minutes: a wait for other ranks (a
 * collective, p2p batch or barrier; on cuda, a host wait for queued NCCL
 * work) that lasts longer than `seconds` ends the job with an error naming
 * the operation, its sequence number on the communicator, its group, and
 * the members that did not arrive (no answer) or wait in another operation.
 * 0, the default, waits forever. While waiting, a rank answers such
 * questions on a private duplicate of MPI_COMM_WORLD; without a timeout no
 * message is ever sent. */
void loomrt_set_timeout(double seconds);

/* Profiling (loom-run --profile): between loomrt_profile_begin_step and
 * loomrt_profile_end_step every entry point called from outside the runtime
 * (compiled code, the rank program) is counted and timed; calls an entry
 * point makes to others inside the runtime are part of its own time. The
 * cpu backend times with the host clock (its calls are synchronous); the
 * cuda backend with events on its compute stream, read once at the end of
 * the step, so a call's time is the device time between its start and end
 * on that stream. A step also counts:
 *   allocations  backend allocations made during it (loomrt_alloc and a
 *                backend's own scratch);
 *   host_syncs   the times the host waited for the device (cuda: each
 *                stream or device synchronization; cpu, which has no
 *                device: each call that would wait on one, i.e. whose
 *                result is complete on the host on return: loomrt_copy,
 *                loomrt_free, loomrt_sum_squares, loomrt_has_nonfinite).
 * The profiler's own wait at the end of the step is not counted. Outside a
 * step nothing is recorded and an entry point pays one predictable branch.
 * Steps do not nest. loomrt_profile_end_step fills `out`; its `entries`
 * (the entry points called at least once, in ABI order) stay valid until
 * the next loomrt_profile_begin_step. */
typedef struct {
  const char *name;
  int64_t count;
  double ms;
} loomrt_profile_entry;
typedef struct {
  double ms;
  int64_t allocations;
  int64_t host_syncs;
  int32_t num_entries;
  const loomrt_profile_entry *entries;
} loomrt_profile_step;
void loomrt_profile_begin_step(void);
void loomrt_profile_end_step(loomrt_profile_step *out);

/* Failure model: communicators use MPI_ERRORS_RETURN, and a failed MPI call
 * aborts the job with "loomrt: rank R: MPI_<Call>: failed: <MPI message>".
 * When a rank dies (signal, abort, exit without loomrt_finalize) mpirun
 * (Open MPI's ORTE/PRRTE) kills every other rank of the job, so survivors
 * blocked in a collective do not hang; launch with mpirun, not singletons. */

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOMRT_LOOMRT_H */
