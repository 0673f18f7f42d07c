//===- Rules.cpp - The argument rule of each entry point ------------------===//
//
// Part of the Loom project.
//
//===----------------------------------------------------------------------===//
//
// See Rules.h. Each rule reports "loomrt: rank R: <entry point>: <reason>"
// and ends the job. A rule returns early where the call is empty: the
// NULL checks after that point apply to calls that touch their tensors
// (the implementation still runs, and handles the empty call).
//
// A few messages name the helper that checks them ("unary: ...",
// "rope: loomrt_rope_forward: ..."): they are printed as they always were.
//
//===----------------------------------------------------------------------===//

#include "runtime/common/Rules.h"

#include "runtime/common/Errors.h"

#include <algorithm>
#include <initializer_list>

using namespace loomrt;
using namespace loomrt::args;

/// LOOMRT_CHECK inside a rule: the message names the entry point of the
/// rule's argument struct `a`.
#define REQUIRE(cond, ...)                                                     \
  do {                                                                         \
    if (!(cond))                                                               \
      ::loomrt::fatal(a.kName, __VA_ARGS__);                                   \
  } while (0)
#define REQUIRE_N(n)                                                           \
  REQUIRE((n) >= 0, "negative element count %lld", (long long)(n))

namespace {

//===----------------------------------------------------------------------===//
// Shared rules
//===----------------------------------------------------------------------===//

/// The sizes of one attention call (q [B,S,Nq,D], k/v [B,Sk,Nkv,D]).
struct AttentionDims {
  int64_t B, S, Sk, Nq, Nkv, D;
};

void checkAttention(const char *fn, const AttentionDims &d, const int32_t *qDoc,
                    const int32_t *kDoc) {
  if (d.B < 0 || d.S < 0 || d.Sk < 0 || d.Nq <= 0 || d.Nkv <= 0 || d.D <= 0)
    fatal(fn, "bad sizes B=%lld S=%lld Sk=%lld Nq=%lld Nkv=%lld D=%lld",
          (long long)d.B, (long long)d.S, (long long)d.Sk, (long long)d.Nq,
          (long long)d.Nkv, (long long)d.D);
  if (d.Nq % d.Nkv != 0)
    fatal(fn, "%lld query heads are not a multiple of %lld kv heads",
          (long long)d.Nq, (long long)d.Nkv);
  if ((qDoc == nullptr) != (kDoc == nullptr))
    fatal(fn, "q_doc and k_doc must both be given or both be NULL");
}

/// Cross-entropy over n rows of V logits (V: this rank's vocabulary slice).
void checkCE(const char *fn, int64_t n, int64_t V) {
  if (n < 0 || V <= 0)
    fatal(fn, "bad sizes n=%lld V=%lld", (long long)n, (long long)V);
}

/// The columns of a V-column slice that are real vocabulary (the rest is
/// padding): 0 <= valid <= V.
void checkValid(const char *fn, int64_t valid, int64_t V) {
  if (valid < 0 || valid > V)
    fatal(fn, "bad vocabulary count valid=%lld of V=%lld", (long long)valid,
          (long long)V);
}

void checkLinear(const char *fn, int64_t M, int64_t N, int64_t K) {
  if (M < 0 || N < 0 || K < 0)
    fatal(fn, "negative size M=%lld N=%lld K=%lld", (long long)M, (long long)N,
          (long long)K);
}

void checkNorm(const char *fn, int64_t rows, int64_t H) {
  if (rows < 0 || H <= 0)
    fatal(fn, "bad sizes rows=%lld H=%lld (H must be positive)",
          (long long)rows, (long long)H);
}

/// A GEMM leading dimension `what` must cover the `cols` stored columns.
void checkLd(const char *what, int64_t ld, int64_t cols) {
  if (ld < std::max<int64_t>(cols, 1))
    fatal("loomrt_gemm", "%s = %lld is smaller than the %lld stored columns",
          what, (long long)ld, (long long)cols);
}

void checkSwiglu(const char *fn, int64_t rows, int64_t F, int64_t in_ld) {
  if (rows < 0 || F < 0 || in_ld < F)
    fatal(fn, "bad sizes rows=%lld F=%lld in_ld=%lld (need in_ld >= F)",
          (long long)rows, (long long)F, (long long)in_ld);
}

void checkEmbedding(const char *fn, int64_t n, int64_t H, int64_t start,
                    int64_t end) {
  if (n < 0 || H <= 0 || start < 0 || end < start)
    fatal(fn, "bad sizes n=%lld H=%lld vocab range [%lld, %lld)", (long long)n,
          (long long)H, (long long)start, (long long)end);
}

/// y = f(x) and dx = dy * f'(x) over n elements.
void unary(const char *fn, int64_t n, const void *x, const void *y) {
  LOOMRT_CHECK(n >= 0, "negative element count %lld", (long long)n);
  if (n == 0)
    return;
  LOOMRT_CHECK(x && y, "%s: NULL tensor", fn);
}

void unaryBackward(const char *fn, int64_t n, const void *x, const void *dy,
                   const void *dx) {
  LOOMRT_CHECK(n >= 0, "negative element count %lld", (long long)n);
  if (n == 0)
    return;
  LOOMRT_CHECK(x && dy && dx, "%s: NULL tensor", fn);
}

void checkGelu(const char *fn, int32_t approximate) {
  if (approximate != LOOMRT_GELU_ERF && approximate != LOOMRT_GELU_TANH)
    fatal(fn, "unknown gelu approximation %d", int(approximate));
}

/// The rope scaling of a call (loomrt_rope_scaling and its numbers).
struct Scaling {
  int32_t kind;
  float factor, low, high;
  int64_t original;
};

void checkScaling(const char *fn, const Scaling &s) {
  if (s.kind == LOOMRT_ROPE_DEFAULT)
    return;
  LOOMRT_CHECK(s.kind == LOOMRT_ROPE_LLAMA3, "%s: unknown rope scaling %d", fn,
               int(s.kind));
  LOOMRT_CHECK(s.factor > 0.0f && s.low > 0.0f && s.high > s.low &&
                   s.original > 0,
               "%s: bad llama3 rope scaling factor=%g low_freq_factor=%g "
               "high_freq_factor=%g original_max_positions=%lld",
               fn, double(s.factor), double(s.low), double(s.high),
               (long long)s.original);
}

template <typename RopeArgs>
void rope(const char *fn, const RopeArgs &a, const void *x, const void *y) {
  if (a.B < 0 || a.S < 0 || a.N < 0 || a.D <= 0 || a.rot_dim < 0 ||
      a.rot_dim > a.D || a.rot_dim % 2 != 0)
    fatal(fn,
          "bad sizes B=%lld S=%lld N=%lld D=%lld rot_dim=%lld (rot_dim must "
          "be even and <= D)",
          (long long)a.B, (long long)a.S, (long long)a.N, (long long)a.D,
          (long long)a.rot_dim);
  LOOMRT_CHECK(a.theta > 0.0f, "%s: theta %g must be positive", fn,
               double(a.theta));
  checkScaling(fn, {a.scaling, a.factor, a.low_freq_factor, a.high_freq_factor,
                    a.original_max_positions});
  if (a.B * a.S * a.N * a.D == 0)
    return;
  LOOMRT_CHECK(x && y, "%s: NULL tensor", fn);
}

/// The [rows, cols] view of dropout, inside a global tensor.
template <typename DropoutArgs>
void dropout(const char *fn, const DropoutArgs &a, const void *x,
             const void *y) {
  if (a.rows < 0 || a.cols < 0 || a.offset < 0 ||
      (a.rows > 1 && a.row_stride < a.cols))
    fatal(fn, "bad view rows=%lld cols=%lld offset=%lld row_stride=%lld",
          (long long)a.rows, (long long)a.cols, (long long)a.offset,
          (long long)a.row_stride);
  LOOMRT_CHECK(a.p >= 0.0f && a.p <= 1.0f, "%s: probability %g not in [0,1]",
               fn, double(a.p));
  if (a.rows == 0 || a.cols == 0)
    return;
  LOOMRT_CHECK(x && y, "%s: NULL tensor", fn);
}

void checkSequencePositions(int64_t B, int64_t L, int64_t start, int64_t chunk,
                            int32_t numChunks, const int32_t *pos) {
  LOOMRT_CHECK(B >= 0 && L >= 0 && start >= 0 && chunk > 0 && numChunks > 0,
               "bad sizes B=%lld L=%lld start=%lld chunk=%lld chunks=%d",
               (long long)B, (long long)L, (long long)start, (long long)chunk,
               numChunks);
  LOOMRT_CHECK(start + L <= chunk * numChunks,
               "tokens [%lld, %lld) beyond a sequence of %lld",
               (long long)start, (long long)(start + L),
               (long long)(chunk * numChunks));
  if (B * L == 0)
    return;
  LOOMRT_CHECK(pos, "NULL tensor");
}

void checkGatherPositions(int64_t B, int64_t S, int64_t L, const int32_t *src,
                          const int32_t *idx, const int32_t *dst) {
  LOOMRT_CHECK(B >= 0 && S >= 0 && L >= 0, "negative size B=%lld S=%lld L=%lld",
               (long long)B, (long long)S, (long long)L);
  if (B * L == 0)
    return;
  LOOMRT_CHECK(src && idx && dst, "NULL tensor");
}

/// A ring attention section: attention over [B,L] on both sides, L even.
template <typename SectionArgs> void checkSection(const SectionArgs &a) {
  checkAttention(a.kName, AttentionDims{a.B, a.L, a.L, a.Nq, a.Nkv, a.D},
                 nullptr, nullptr);
  if (a.L % 2 != 0)
    fatal(a.kName, "L = %lld local tokens is odd (need two chunks of L/2)",
          (long long)a.L);
  if (a.section != LOOMRT_SECTION_DIAGONAL &&
      a.section != LOOMRT_SECTION_LOWER && a.section != LOOMRT_SECTION_UPPER)
    fatal(a.kName, "bad section %d (0 diagonal, 1 lower, 2 upper)",
          (int)a.section);
}

/// The all-gather layout: whole chunks of a num_chunks * chunk sequence,
/// `order` a permutation of the chunks (host memory).
template <typename ChunkedArgs> void checkChunked(const ChunkedArgs &a) {
  const char *fn = a.kName;
  if (a.chunk <= 0 || a.num_chunks <= 0)
    fatal(fn, "bad chunking: chunk = %lld, num_chunks = %d (need both > 0)",
          (long long)a.chunk, (int)a.num_chunks);
  const int64_t S = a.chunk * a.num_chunks;
  checkAttention(fn, AttentionDims{a.B, a.L, S, a.Nq, a.Nkv, a.D}, a.q_doc,
                 a.k_doc);
  if (a.L % a.chunk != 0)
    fatal(fn, "L = %lld local tokens is not a multiple of chunk = %lld",
          (long long)a.L, (long long)a.chunk);
  if (a.start < 0 || a.start % a.chunk != 0)
    fatal(fn, "start = %lld is not a chunk boundary (chunk = %lld)",
          (long long)a.start, (long long)a.chunk);
  if (a.start + a.L > S)
    fatal(fn, "tokens [%lld, %lld) beyond a sequence of %lld (%d chunks)",
          (long long)a.start, (long long)(a.start + a.L), (long long)S,
          (int)a.num_chunks);
  if (a.order)
    for (int32_t j = 0; j < a.num_chunks; ++j)
      if (a.order[j] < 0 || a.order[j] >= a.num_chunks)
        fatal(fn, "order[%d] = %lld is not a chunk of %d", (int)j,
              (long long)a.order[j], (int)a.num_chunks);
}

} // namespace

//===----------------------------------------------------------------------===//
// Process, memory
//===----------------------------------------------------------------------===//

void rules::check(const Alloc &a) {
  REQUIRE(a.bytes >= 0, "negative size %lld", (long long)a.bytes);
}

void rules::check(const Copy &a) {
  REQUIRE(a.bytes >= 0, "negative size %lld", (long long)a.bytes);
}

void rules::check(const Zero &a) {
  REQUIRE(a.bytes >= 0, "negative size %lld", (long long)a.bytes);
}

void rules::check(const Copy2d &a) {
  REQUIRE(a.rows >= 0 && a.row_bytes >= 0 &&
              (a.rows <= 1 ||
               (a.dst_stride >= a.row_bytes && a.src_stride >= a.row_bytes)),
          "bad copy rows=%lld row_bytes=%lld dst_stride=%lld "
          "src_stride=%lld",
          (long long)a.rows, (long long)a.row_bytes, (long long)a.dst_stride,
          (long long)a.src_stride);
  if (a.rows == 0 || a.row_bytes == 0)
    return;
  REQUIRE(a.dst && a.src, "NULL buffer");
}

//===----------------------------------------------------------------------===//
// Casts, elementwise helpers, checks
//===----------------------------------------------------------------------===//

void rules::check(const Cast &a) {
  REQUIRE_N(a.n);
  if (a.n == 0)
    return;
  REQUIRE(a.src, "src is NULL");
  REQUIRE(a.dst, "dst is NULL");
  REQUIRE(a.src != a.dst || dtypeSize(a.src_dtype) == dtypeSize(a.dst_dtype),
          "in-place cast needs equal element sizes");
}

void rules::check(const HasNonfinite &a) {
  REQUIRE_N(a.n);
  if (a.n == 0)
    return;
  REQUIRE(a.x, "x is NULL");
}

void rules::check(const Scale &a) {
  REQUIRE_N(a.n);
  if (a.n == 0)
    return;
  REQUIRE(a.x, "x is NULL");
}

void rules::check(const Axpy &a) {
  REQUIRE_N(a.n);
  if (a.n == 0)
    return;
  REQUIRE(a.x, "x is NULL");
  REQUIRE(a.y, "y is NULL");
}

void rules::check(const Add &a) {
  REQUIRE_N(a.n);
  if (a.n == 0)
    return;
  REQUIRE(a.a, "a is NULL");
  REQUIRE(a.b, "b is NULL");
  REQUIRE(a.out, "out is NULL");
}

void rules::check(const AddBias &a) {
  REQUIRE_N(a.rows);
  REQUIRE_N(a.n);
  if (a.rows * a.n == 0)
    return;
  REQUIRE(a.x, "x is NULL");
  REQUIRE(a.bias, "bias is NULL");
  REQUIRE(a.out, "out is NULL");
}

void rules::check(const SumSquares &a) {
  REQUIRE_N(a.n);
  if (a.n == 0)
    return;
  REQUIRE(a.x, "x is NULL");
}

void rules::check(const SumSquaresAdd &a) {
  REQUIRE_N(a.n);
  REQUIRE(a.acc, "acc is NULL");
  if (a.n > 0)
    REQUIRE(a.x, "x is NULL");
}

//===----------------------------------------------------------------------===//
// GEMM and linear layers
//===----------------------------------------------------------------------===//

void rules::check(const Gemm &a) {
  REQUIRE(a.M >= 0 && a.N >= 0 && a.K >= 0 && a.batch >= 0,
          "negative size M=%lld N=%lld K=%lld batch=%lld", (long long)a.M,
          (long long)a.N, (long long)a.K, (long long)a.batch);
  REQUIRE(a.stride_a >= 0 && a.stride_b >= 0 && a.stride_c >= 0,
          "negative batch stride");
  if (a.M == 0 || a.N == 0 || a.batch == 0)
    return;
  // Stored shapes: A is [M,K] or [K,M], B is [K,N] or [N,K].
  checkLd("lda", a.lda, a.trans_a ? a.M : a.K);
  checkLd("ldb", a.ldb, a.trans_b ? a.K : a.N);
  checkLd("ldc", a.ldc, a.N);
  REQUIRE(a.C && (a.K == 0 || (a.A && a.B)), "NULL matrix");
  REQUIRE(a.batch == 1 || a.stride_c != 0,
          "stride_c = 0 would make the batch entries race on C");
}

void rules::check(const LinearForward &a) {
  checkLinear(a.kName, a.M, a.N, a.K);
  if (a.M == 0 || a.N == 0)
    return;
  REQUIRE(a.y && (a.K == 0 || (a.x && a.W)), "NULL tensor");
}

void rules::check(const LinearBackwardData &a) {
  checkLinear(a.kName, a.M, a.N, a.K);
  if (a.M == 0 || a.K == 0)
    return;
  REQUIRE(a.dx && (a.N == 0 || (a.dy && a.W)), "NULL tensor");
}

void rules::check(const LinearBackwardWeight &a) {
  checkLinear(a.kName, a.M, a.N, a.K);
  if (a.N == 0)
    return;
  REQUIRE(a.dW || a.K == 0, "dW is NULL");
  REQUIRE(a.M == 0 || a.dy, "dy is NULL");
  if (a.K)
    REQUIRE(a.M == 0 || a.x, "x is NULL");
}

/// Linears of one input: count >= 1, the sizes and the host arrays of
/// pointers every call reads (each linear's own sizes and tensors are
/// checked by its call).
template <typename MultiArgs>
static void checkMulti(const MultiArgs &a,
                       std::initializer_list<const void *> arrays) {
  REQUIRE(a.count >= 1, "count is %d (at least one linear)", int(a.count));
  REQUIRE(a.N && std::find(arrays.begin(), arrays.end(), nullptr) ==
                     arrays.end(),
          "NULL host array");
  for (int32_t i = 0; i < a.count; ++i)
    REQUIRE(a.N[i] >= 0, "N[%d] is %lld", int(i), (long long)a.N[i]);
}

void rules::check(const MultiLinearForward &a) { checkMulti(a, {a.W, a.y}); }

void rules::check(const MultiLinearBackwardData &a) {
  checkMulti(a, {a.W, a.dy});
}

void rules::check(const MultiLinearBackwardWeight &a) {
  checkMulti(a, {a.dW, a.dy});
}

void rules::check(const LinearGeluForward &a) {
  checkGelu(a.kName, a.approximate);
}

void rules::check(const LinearBackwardDataGelu &a) {
  checkGelu(a.kName, a.approximate);
}

//===----------------------------------------------------------------------===//
// Normalization
//===----------------------------------------------------------------------===//

void rules::check(const LayerNormForward &a) {
  checkNorm(a.kName, a.rows, a.H);
  if (a.rows == 0)
    return;
  REQUIRE(a.x && a.w && a.y, "NULL tensor");
}

void rules::check(const LayerNormBackward &a) {
  checkNorm(a.kName, a.rows, a.H);
  REQUIRE(a.x && a.w && a.dy && a.dx && a.dw, "NULL tensor");
}

void rules::check(const RmsNormForward &a) {
  checkNorm(a.kName, a.rows, a.H);
  if (a.rows == 0)
    return;
  REQUIRE(a.x && a.w && a.y, "NULL tensor");
}

void rules::check(const AddLayerNormForward &a) {
  checkNorm(a.kName, a.rows, a.H);
  if (a.rows == 0)
    return;
  REQUIRE(a.x && a.residual && a.w && a.sum && a.y, "NULL tensor");
}

void rules::check(const AddRmsNormForward &a) {
  checkNorm(a.kName, a.rows, a.H);
  if (a.rows == 0)
    return;
  REQUIRE(a.x && a.residual && a.w && a.sum && a.y, "NULL tensor");
}

void rules::check(const RmsNormBackward &a) {
  checkNorm(a.kName, a.rows, a.H);
  REQUIRE(a.x && a.w && a.dy && a.dx && a.dw, "NULL tensor");
}

//===----------------------------------------------------------------------===//
// Rotary embedding, position and document ids
//===----------------------------------------------------------------------===//

void rules::check(const RopeForward &a) { rope(a.kName, a, a.x, a.y); }

void rules::check(const RopeBackward &a) { rope(a.kName, a, a.dy, a.dx); }

void rules::check(const DocumentIds &a) {
  REQUIRE(a.B >= 0 && a.S >= 0, "negative size B=%lld S=%lld", (long long)a.B,
          (long long)a.S);
  if (a.B * a.S == 0)
    return;
  REQUIRE(a.tokens && a.doc, "NULL tensor");
}

void rules::check(const PositionIds &a) {
  REQUIRE(a.B >= 0 && a.S >= 0, "negative size B=%lld S=%lld", (long long)a.B,
          (long long)a.S);
  if (a.B * a.S == 0)
    return;
  REQUIRE(a.pos && (a.tokens || !a.reset), "NULL tensor");
}

void rules::check(const GatherPositions &a) {
  checkGatherPositions(a.B, a.S, a.L, a.src, a.idx, a.dst);
}

void rules::check(const SequencePositions &a) {
  checkSequencePositions(a.B, a.L, a.start, a.chunk, a.num_chunks, a.pos);
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

void rules::check(const AttentionForward &a) {
  checkAttention(a.kName, {a.B, a.S, a.Sk, a.Nq, a.Nkv, a.D}, a.q_doc, a.k_doc);
  if (a.B == 0 || a.S == 0)
    return;
  REQUIRE(a.q && a.o && a.lse && (a.Sk == 0 || (a.k && a.v)), "NULL tensor");
}

void rules::check(const AttentionMerge &a) {
  REQUIRE(a.B >= 0 && a.S >= 0 && a.Nq > 0 && a.D > 0,
          "bad sizes B=%lld S=%lld Nq=%lld D=%lld", (long long)a.B,
          (long long)a.S, (long long)a.Nq, (long long)a.D);
  if (a.B * a.S == 0)
    return;
  REQUIRE(a.o_acc && a.lse_acc && a.o_part && a.lse_part, "NULL tensor");
}

void rules::check(const AttentionBackward &a) {
  checkAttention(a.kName, {a.B, a.S, a.Sk, a.Nq, a.Nkv, a.D}, a.q_doc, a.k_doc);
  if (a.B == 0 || (a.S == 0 && a.Sk == 0))
    return;
  REQUIRE((a.S == 0 || (a.q && a.o && a.lse && a.dout && a.dq)) &&
              (a.Sk == 0 || (a.k && a.v && a.dk && a.dv)),
          "NULL tensor");
}

void rules::check(const AttentionSectionForward &a) {
  checkSection(a);
  if (a.B == 0 || a.L == 0)
    return;
  REQUIRE(a.q && a.k && a.v && a.o_acc && a.lse_acc, "NULL tensor");
  REQUIRE(!a.q_doc == !a.k_doc, "q_doc and k_doc: both or neither");
}

void rules::check(const AttentionSectionBackward &a) {
  checkSection(a);
  if (a.B == 0 || a.L == 0)
    return;
  REQUIRE(a.q && a.k && a.v && a.o && a.lse && a.dout && a.dq && a.dk && a.dv,
          "NULL tensor");
  REQUIRE(!a.q_doc == !a.k_doc, "q_doc and k_doc: both or neither");
}

void rules::check(const AttentionChunkedForward &a) {
  checkChunked(a);
  if (a.B == 0 || a.L == 0)
    return;
  REQUIRE(a.q && a.k && a.v && a.o && a.lse, "NULL tensor");
}

void rules::check(const AttentionChunkedBackward &a) {
  checkChunked(a);
  if (a.B == 0)
    return;
  // dk and dv are zeroed even when L == 0 (no local query sees any key).
  REQUIRE(a.dk && a.dv, "NULL tensor");
  if (a.L == 0)
    return;
  REQUIRE(a.q && a.k && a.v && a.o && a.lse && a.dout && a.dq, "NULL tensor");
}

//===----------------------------------------------------------------------===//
// Activations, dropout
//===----------------------------------------------------------------------===//

void rules::check(const GeluForward &a) {
  checkGelu(a.kName, a.approximate);
  unary(a.kName, a.n, a.x, a.y);
}

void rules::check(const GeluBackward &a) {
  checkGelu(a.kName, a.approximate);
  unaryBackward(a.kName, a.n, a.x, a.dy, a.dx);
}

void rules::check(const SiluForward &a) { unary(a.kName, a.n, a.x, a.y); }

void rules::check(const SiluBackward &a) {
  unaryBackward(a.kName, a.n, a.x, a.dy, a.dx);
}

void rules::check(const SwigluForward &a) {
  checkSwiglu(a.kName, a.rows, a.F, a.in_ld);
  if (a.rows == 0 || a.F == 0)
    return;
  REQUIRE(a.gate && a.up && a.out, "NULL tensor");
}

void rules::check(const SwigluBackward &a) {
  checkSwiglu(a.kName, a.rows, a.F, a.in_ld);
  if (a.rows == 0 || a.F == 0)
    return;
  REQUIRE(a.gate && a.up && a.dout && a.dgate && a.dup, "NULL tensor");
}

void rules::check(const DropoutForward &a) { dropout(a.kName, a, a.x, a.y); }

void rules::check(const DropoutBackward &a) { dropout(a.kName, a, a.dy, a.dx); }

//===----------------------------------------------------------------------===//
// Embedding, cross-entropy, optimizer
//===----------------------------------------------------------------------===//

void rules::check(const EmbeddingForward &a) {
  checkEmbedding(a.kName, a.n, a.H, a.vocab_start, a.vocab_end);
  if (a.n == 0)
    return;
  REQUIRE(a.ids && a.out && (a.table || a.vocab_end == a.vocab_start),
          "NULL tensor");
}

void rules::check(const EmbeddingBackward &a) {
  checkEmbedding(a.kName, a.n, a.H, a.vocab_start, a.vocab_end);
  if (a.vocab_end == a.vocab_start)
    return;
  REQUIRE(a.dtable && (a.n == 0 || (a.ids && a.dout)), "NULL tensor");
}

void rules::check(const CrossEntropyForward &a) {
  checkCE(a.kName, a.n, a.V);
  REQUIRE(a.loss, "loss is NULL");
  if (a.n == 0)
    return;
  REQUIRE(a.logits && a.labels, "NULL tensor");
}

void rules::check(const CrossEntropyBackward &a) {
  checkCE(a.kName, a.n, a.V);
  if (a.n == 0)
    return;
  REQUIRE(a.logits && a.labels && a.dlogits, "NULL tensor");
}

void rules::check(const CeLocalMax &a) {
  checkCE(a.kName, a.n, a.Vl);
  checkValid(a.kName, a.valid, a.Vl);
  if (a.n == 0)
    return;
  REQUIRE(a.logits && a.row_max, "NULL tensor");
}

void rules::check(const CeLocalSumExp &a) {
  checkCE(a.kName, a.n, a.Vl);
  checkValid(a.kName, a.valid, a.Vl);
  if (a.n == 0)
    return;
  REQUIRE(a.logits && a.row_max && a.sum_exp, "NULL tensor");
}

void rules::check(const CeLocalTarget &a) {
  checkCE(a.kName, a.n, a.Vl);
  if (a.n == 0)
    return;
  REQUIRE(a.logits && a.labels && a.target, "NULL tensor");
}

void rules::check(const CeLossFromParts &a) {
  REQUIRE(a.n >= 0, "negative row count %lld", (long long)a.n);
  REQUIRE(a.masked_sum && a.mask_sum, "NULL output");
  REQUIRE(a.n == 0 || (a.row_max && a.sum_exp && a.target), "NULL tensor");
}

void rules::check(const MaskSum &a) {
  REQUIRE(a.n >= 0, "negative row count %lld", (long long)a.n);
  REQUIRE(a.sum && (a.n == 0 || a.mask), "NULL tensor");
}

void rules::check(const CeVocabParallelBackward &a) {
  checkCE(a.kName, a.n, a.Vl);
  checkValid(a.kName, a.valid, a.Vl);
  if (a.n == 0)
    return;
  REQUIRE(a.logits && a.labels && a.row_max && a.sum_exp && a.dlogits,
          "NULL tensor");
  REQUIRE(a.grad_scale, "NULL grad_scale");
}

void rules::check(const Adamw &a) {
  REQUIRE_N(a.n);
  REQUIRE(a.step >= 1, "step %lld must be >= 1", (long long)a.step);
  if (a.n == 0)
    return;
  REQUIRE(a.param && a.grad && a.exp_avg && a.exp_avg_sq, "NULL tensor");
}

// The table is host memory (loomrt.h), so the rule reads it; the tensors it
// lists are not read.
void rules::check(const AdamwMulti &a) {
  REQUIRE(a.count >= 0, "negative tensor count %lld", (long long)a.count);
  REQUIRE(a.step >= 1, "step %lld must be >= 1", (long long)a.step);
  if (a.count == 0)
    return;
  REQUIRE(a.tensors, "NULL tensor table");
  for (int64_t i = 0; i < a.count; ++i) {
    const loomrt_adamw_tensor &t = a.tensors[i];
    REQUIRE(t.n >= 0, "tensors[%lld]: negative element count %lld",
            (long long)i, (long long)t.n);
    REQUIRE(t.n == 0 || (t.param && t.grad && t.exp_avg && t.exp_avg_sq),
            "tensors[%lld]: NULL tensor", (long long)i);
  }
}

void rules::check(const ProfileEndStep &a) {
  REQUIRE(a.out, "NULL out");
}

void rules::check(const SafeDivide &a) {
  REQUIRE(a.num && a.den && a.out, "NULL scalar");
}

//===----------------------------------------------------------------------===//
// Mixture of experts
//===----------------------------------------------------------------------===//

namespace {
/// T tokens, each to k of E experts.
template <typename Args> void checkRouting(const Args &a) {
  REQUIRE(a.T >= 0 && a.E > 0 && a.k > 0 && a.k <= a.E,
          "bad sizes T=%lld E=%lld k=%lld (need 0 < k <= E)", (long long)a.T,
          (long long)a.E, (long long)a.k);
}
/// T tokens of H features, k rows each.
template <typename Args> void checkRows(const Args &a) {
  REQUIRE(a.T >= 0 && a.H >= 0 && a.k > 0, "bad sizes T=%lld H=%lld k=%lld",
          (long long)a.T, (long long)a.H, (long long)a.k);
}
/// E experts over P ranks, this one r; every rank's N rows of H features
/// gathered; M dispatched rows.
template <typename Args> void checkExpertRows(const Args &a) {
  REQUIRE(a.P > 0 && a.r >= 0 && a.r < a.P && a.E > 0 && a.E % a.P == 0,
          "bad ranks or experts P=%lld r=%lld E=%lld", (long long)a.P,
          (long long)a.r, (long long)a.E);
  REQUIRE(a.N >= 0 && a.H >= 0 && a.M >= 0, "bad sizes N=%lld H=%lld M=%lld",
          (long long)a.N, (long long)a.H, (long long)a.M);
  REQUIRE(a.all_counts && a.gathered && a.dispatched, "NULL tensor");
}
template <typename Args> void checkGrouped(const Args &a) {
  REQUIRE(a.M >= 0 && a.N >= 0 && a.K >= 0 && a.E > 0,
          "bad sizes M=%lld N=%lld K=%lld E=%lld", (long long)a.M,
          (long long)a.N, (long long)a.K, (long long)a.E);
  REQUIRE(a.counts, "NULL tensor");
}
} // namespace

void rules::check(const MoeRouteForward &a) {
  checkRouting(a);
  if (a.T)
    REQUIRE(a.logits && a.probs && a.experts, "NULL tensor");
}
void rules::check(const MoeRouteBackward &a) {
  checkRouting(a);
  if (a.T)
    REQUIRE(a.logits && a.experts && a.dprobs && a.dlogits, "NULL tensor");
}
void rules::check(const MoeRouteCounts &a) {
  checkRouting(a);
  REQUIRE(a.counts && (a.T == 0 || a.experts), "NULL tensor");
}
void rules::check(const MoeRouterLossForward &a) {
  checkRouting(a);
  REQUIRE(a.aux_loss && a.z_loss && a.counts && (a.T == 0 || a.logits),
          "NULL tensor");
}
void rules::check(const MoeRouterLossBackward &a) {
  checkRouting(a);
  if (a.T)
    REQUIRE(a.logits && a.counts && a.grad_scale && a.dlogits, "NULL tensor");
}
void rules::check(const MoeDrop &a) {
  checkRouting(a);
  REQUIRE(a.capacity >= 0, "bad capacity %lld", (long long)a.capacity);
  REQUIRE(a.policy == 0 || a.policy == 1, "bad drop policy %d (0 probs, 1 position)",
          a.policy);
  if (a.T)
    REQUIRE(a.probs && a.experts && a.kept, "NULL tensor");
}
void rules::check(const MoePermute &a) {
  checkRows(a);
  REQUIRE(a.E > 0, "bad expert count E=%lld", (long long)a.E);
  REQUIRE(a.N >= 0 && a.pad_to >= 0, "bad sizes N=%lld pad_to=%lld",
          (long long)a.N, (long long)a.pad_to);
  REQUIRE(a.pad_to == 0 || a.N == a.E * a.pad_to,
          "N=%lld rows are not E=%lld groups of pad_to=%lld", (long long)a.N,
          (long long)a.E, (long long)a.pad_to);
  REQUIRE(a.counts && (a.T == 0 || (a.x && a.experts && a.row_map)) &&
              (a.N == 0 || a.rows),
          "NULL tensor");
}
void rules::check(const MoePermuteBackward &a) {
  checkRows(a);
  if (a.T)
    REQUIRE(a.drows && a.row_map && a.dx, "NULL tensor");
}
void rules::check(const MoeUnpermute &a) {
  checkRows(a);
  if (a.T)
    REQUIRE(a.rows && a.probs && a.row_map && a.out, "NULL tensor");
}
void rules::check(const MoeUnpermuteBackward &a) {
  checkRows(a);
  REQUIRE(a.N >= 0, "bad row count N=%lld", (long long)a.N);
  if (a.T)
    REQUIRE(a.rows && a.probs && a.row_map && a.dout && a.drows && a.dprobs,
            "NULL tensor");
}
void rules::check(const MoeTakeExpertRows &a) {
  checkExpertRows(a);
  REQUIRE(a.local_counts, "NULL tensor");
}
void rules::check(const MoePutExpertRows &a) { checkExpertRows(a); }
void rules::check(const GroupedLinearForward &a) {
  checkGrouped(a);
  REQUIRE(a.W && (a.M == 0 || (a.x && a.y)), "NULL tensor");
}
void rules::check(const GroupedLinearBackwardData &a) {
  checkGrouped(a);
  REQUIRE(a.W && (a.M == 0 || (a.dy && a.dx)), "NULL tensor");
}
void rules::check(const GroupedLinearBackwardWeight &a) {
  checkGrouped(a);
  REQUIRE(a.dW && (a.M == 0 || (a.dy && a.x)), "NULL tensor");
}
void rules::check(const SigmoidGateForward &a) {
  REQUIRE(a.rows >= 0 && a.H >= 0, "bad sizes rows=%lld H=%lld",
          (long long)a.rows, (long long)a.H);
  if (a.rows)
    REQUIRE(a.x && a.gate && a.out, "NULL tensor");
}
void rules::check(const SigmoidGateBackward &a) {
  REQUIRE(a.rows >= 0 && a.H >= 0, "bad sizes rows=%lld H=%lld",
          (long long)a.rows, (long long)a.H);
  if (a.rows)
    REQUIRE(a.x && a.gate && a.dout && a.dx && a.dgate, "NULL tensor");
}
