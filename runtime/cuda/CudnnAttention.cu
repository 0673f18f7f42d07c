//===- CudnnAttention.cu - cuDNN's fused attention (SDPA) ------*- CUDA -*-===//
//
// Scaled dot-product attention, forward with its log-sum-exp and backward,
// on cuDNN's fused flash-attention engines. cudnn_frontend is not packaged
// for this platform, so the operation graphs are built here with the raw
// cuDNN 9 backend API, node for node as cudnn_frontend 1.x builds its
// composite SDPA graphs for cuDNN 9 below 9.21 (CompositeSDPANode,
// CompositeSDPABackwardNode, CompositeSoftmaxNode and
// CompositeDiagonalBandMaskNode): the fused engines recognize those graph
// patterns, so the data types, virtual tensors and by-value scalars follow
// the frontend exactly.
//
// A plan (operation graph, heuristics mode A, the first engine
// configuration that finalizes) is built once per shape and direction and
// cached, as is a shape without one. The attention scale is a by-value
// scalar, so it is not part of the key.
//
//===----------------------------------------------------------------------===//

#include "Common.h"
#include "CudnnAttention.h"

#include <cudnn.h>

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

using namespace loomrt;

namespace {

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

/// cuDNN's name for a status and, when it has one, its message about the
/// failure just seen on this thread.
std::string describe(cudnnStatus_t status) {
  char detail[512] = "";
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string text = cudnnGetErrorString(status);
  if (detail[0])
    text += std::string(": ") + detail;
  return text;
}

/// Aborts when a cuDNN call fails: a malformed descriptor or a failed
/// launch is a bug here, not a shape cuDNN declines.
#define CUDNN_CHECK(call)                                                      \
  do {                                                                         \
    cudnnStatus_t st_ = (call);                                                \
    if (st_ != CUDNN_STATUS_SUCCESS)                                           \
      ::loomrt::fatal(__func__, "%s: %s", #call, describe(st_).c_str());       \
  } while (0)

/// Whether cuDNN declined (a graph, a heuristics query, an engine
/// configuration) rather than failed.
bool notSupported(cudnnStatus_t status) {
  return CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED;
}

//===----------------------------------------------------------------------===//
// Process-wide state
//===----------------------------------------------------------------------===//

/// The device and library, looked up once.
struct Device {
  cudnnHandle_t handle = nullptr; // null when cuDNN cannot be used
  int major = 0;                  // compute capability
  size_t version = 0;             // cudnnGetVersion(), e.g. 91900
  std::string unavailable;        // why handle is null
};

const Device &device() {
  static const Device dev = [] {
    Device d;
    cudaStream_t compute = stream(); // creates the context on its device
    CUDA_CHECK(cudaDeviceGetAttribute(
        &d.major, cudaDevAttrComputeCapabilityMajor, ctx().device));
    d.version = cudnnGetVersion();
    // The fused engines need Ampere or later and cuDNN 9 (the library
    // found at run time may be older than the headers built against).
    if (d.major < 8) {
      d.unavailable = "compute capability " + std::to_string(d.major) +
                      ".x (fused attention needs 8.0 or later)";
      return d;
    }
    if (d.version < 90000) {
      d.unavailable = "cuDNN " + std::to_string(d.version) +
                      " at run time (9.0 or later needed)";
      return d;
    }
    cudnnStatus_t status = cudnnCreate(&d.handle);
    if (status != CUDNN_STATUS_SUCCESS) {
      d.handle = nullptr;
      d.unavailable = "cudnnCreate: " + describe(status);
      return d;
    }
    CUDNN_CHECK(cudnnSetStream(d.handle, compute));
    return d;
  }();
  return dev;
}

/// The masked-score value: the frontend uses -inf from cuDNN 9.10 and the
/// lowest float before (older engines preferred it). Host memory, as
/// by-value scalars are passed.
float *maskValue() {
  static float value = device().version < 91000
                           ? std::numeric_limits<float>::lowest()
                           : -std::numeric_limits<float>::infinity();
  return &value;
}

//===----------------------------------------------------------------------===//
// Backend descriptors
//===----------------------------------------------------------------------===//

/// Owns one cudnnBackendDescriptor_t.
class Descriptor {
public:
  explicit Descriptor(cudnnBackendDescriptorType_t type) {
    CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &desc));
  }
  ~Descriptor() {
    if (desc)
      cudnnBackendDestroyDescriptor(desc);
  }
  Descriptor(Descriptor &&other) noexcept
      : desc(std::exchange(other.desc, nullptr)) {}
  Descriptor(const Descriptor &) = delete;
  Descriptor &operator=(const Descriptor &) = delete;
  cudnnBackendDescriptor_t get() const { return desc; }

private:
  cudnnBackendDescriptor_t desc = nullptr;
};

void setAttr(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
             cudnnBackendAttributeType_t type, int64_t count,
             const void *values) {
  cudnnStatus_t status =
      cudnnBackendSetAttribute(desc, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS)
    fatal(__func__, "cudnnBackendSetAttribute(attribute %d): %s", int(name),
          describe(status).c_str());
}

void setDesc(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
             cudnnBackendDescriptor_t value) {
  setAttr(desc, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}

void finalize(cudnnBackendDescriptor_t desc, const char *what) {
  cudnnStatus_t status = cudnnBackendFinalize(desc);
  if (status != CUDNN_STATUS_SUCCESS)
    fatal(__func__, "finalizing the %s: %s", what, describe(status).c_str());
}

//===----------------------------------------------------------------------===//
// Graph building
//===----------------------------------------------------------------------===//

using Dims = std::vector<int64_t>;

/// A finalized tensor descriptor with the shape the ops derive theirs from.
struct Tensor {
  cudnnBackendDescriptor_t desc;
  Dims dims, strides;
};

/// Unique ids: the variant pack binds the non-virtual ones to memory.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kDO,
  kDQ,
  kDK,
  kDV,
  kScale,
  kOne,
  kMaskValue,
  kRowSum,
  kDQAccum,
  kFirstVirtual = 100,
};

/// An execution plan with everything it refers to, or why there is none.
struct Plan {
  std::vector<Descriptor> descriptors;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  std::string refusal;
};

/// Builds one operation graph; every descriptor it creates lives in it (and
/// then in the plan).
class Graph {
public:
  /// A tensor the variant pack binds to device memory.
  Tensor tensor(int64_t uid, cudnnDataType_t type, Dims dims, Dims strides) {
    return make(uid, type, std::move(dims), std::move(strides), false, false);
  }
  /// An f32 scalar passed by value from host memory. The frontend gives its
  /// scalars the rank of the other operands (all ours are 4-d).
  Tensor scalar(int64_t uid) {
    return make(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }
  /// An intermediate the engine keeps to itself.
  Tensor virt(cudnnDataType_t type, Dims dims, Dims strides) {
    return make(nextVirtual++, type, std::move(dims), std::move(strides), true,
                false);
  }
  Tensor like(const Tensor &x, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return virt(type, x.dims, x.strides);
  }

  /// c = a b over the last two dimensions, batched (and broadcast from
  /// fewer kv heads) over the first two; f32 accumulation.
  void matmul(const Tensor &a, const Tensor &b, const Tensor &c) {
    cudnnBackendDescriptor_t desc = own(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    setAttr(desc, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
            &compute);
    finalize(desc, "matmul descriptor");
    cudnnBackendDescriptor_t op =
        own(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, desc);
    add(op, "matmul operation");
  }

  /// y = mode(x[, b[, t]]). `axis` is GEN_INDEX's dimension.
  void pointwise(cudnnPointwiseMode_t mode, const Tensor &y, const Tensor &x,
                 const Tensor *b = nullptr, const Tensor *t = nullptr,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT,
                 int64_t axis = -1) {
    cudnnBackendDescriptor_t desc = own(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    setAttr(desc, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1,
            &mode);
    setAttr(desc, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1,
            &compute);
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
      setAttr(desc, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    finalize(desc, "pointwise descriptor");
    cudnnBackendDescriptor_t op =
        own(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    const float one = 1.0f;
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y.desc);
    setAttr(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1,
            &one);
    setAttr(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1,
            &one);
    if (b)
      setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b->desc);
    if (t)
      setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t->desc);
    add(op, "pointwise operation");
  }
  /// An f32 intermediate shaped like x.
  Tensor unary(cudnnPointwiseMode_t mode, const Tensor &x) {
    Tensor y = like(x);
    pointwise(mode, y, x);
    return y;
  }
  Tensor binary(cudnnPointwiseMode_t mode, const Tensor &x, const Tensor &b) {
    Tensor y = like(x);
    pointwise(mode, y, x, &b);
    return y;
  }

  /// y = x reduced over the dimensions where y has extent 1 (or fewer
  /// heads), in f32.
  void reduction(cudnnReduceTensorOp_t mode, const Tensor &x, const Tensor &y) {
    cudnnBackendDescriptor_t desc = own(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    setAttr(desc, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
            &compute);
    setAttr(desc, CUDNN_ATTR_REDUCTION_OPERATOR,
            CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    // The attribute exists from 9.11; the frontend sets it (false) there.
    if (device().version >= 91100) {
      const bool deterministic = false;
      setAttr(desc, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN,
              1, &deterministic);
    }
    finalize(desc, "reduction descriptor");
    cudnnBackendDescriptor_t op =
        own(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc);
    add(op, "reduction operation");
  }

  /// y views x's data with other dims and strides (a transpose here).
  void reshape(const Tensor &x, const Tensor &y) {
    cudnnBackendDescriptor_t op =
        own(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    setDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x.desc);
    setDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y.desc);
    add(op, "reshape operation");
  }

  /// Top-left causal mask of [b, h, s_q, s_kv] scores: key j stays visible
  /// from query i iff i >= j, the others become the mask value (the
  /// frontend's diagonal band mask with right bound 0).
  Tensor causalMask(const Tensor &scores, const Tensor &maskValue) {
    // row = i, col = j (int32 outputs, f32 compute as in the frontend)
    Tensor row = like(scores, CUDNN_DATA_INT32);
    Tensor col = like(scores, CUDNN_DATA_INT32);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, row, scores, nullptr, nullptr,
              CUDNN_DATA_FLOAT, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, col, scores, nullptr, nullptr,
              CUDNN_DATA_FLOAT, 3);
    // visible = row >= col
    Tensor visible = like(row, CUDNN_DATA_BOOLEAN);
    pointwise(CUDNN_POINTWISE_CMP_GE, visible, row, &col, nullptr,
              CUDNN_DATA_BOOLEAN);
    // masked = visible ? scores : mask value
    Tensor masked = like(scores);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, masked, scores, &maskValue,
              &visible);
    return masked;
  }

  /// The operation graph, heuristics mode A, and the first engine
  /// configuration that finalizes.
  Plan plan() {
    Plan p;
    const cudnnHandle_t handle = device().handle;
    cudnnBackendDescriptor_t graph =
        own(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    setAttr(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1,
            &handle);
    setAttr(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            int64_t(ops.size()), ops.data());
    if (!tryFinalize(graph, "the operation graph", p))
      return p;

    cudnnBackendDescriptor_t heuristics =
        own(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    setDesc(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
    setAttr(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
            &mode);
    if (!tryFinalize(heuristics, "the heuristics query", p))
      return p;
    int64_t count = 0;
    CUDNN_CHECK(cudnnBackendGetAttribute(
        heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
    std::vector<cudnnBackendDescriptor_t> configs;
    for (int64_t i = 0; i < count; ++i)
      configs.push_back(own(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    if (count > 0)
      CUDNN_CHECK(cudnnBackendGetAttribute(
          heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count, configs.data()));
    if (count == 0) {
      p.refusal = "the heuristics propose no engine for the graph";
      return p;
    }

    // As the frontend does, a configuration that does not finalize (an
    // engine that declines the shape) is skipped.
    std::string lastRefusal;
    for (int64_t i = 0; i < count; ++i) {
      cudnnBackendDescriptor_t candidate =
          own(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      setAttr(candidate, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
              &handle);
      setDesc(candidate, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i]);
      cudnnStatus_t status = cudnnBackendFinalize(candidate);
      if (status != CUDNN_STATUS_SUCCESS) {
        lastRefusal = describe(status);
        continue;
      }
      int64_t returned = 0;
      CUDNN_CHECK(cudnnBackendGetAttribute(
          candidate, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
          1, &returned, &p.workspace));
      p.plan = candidate;
      p.descriptors = std::move(owned);
      return p;
    }
    p.refusal = "none of the " + std::to_string(count) +
                " engine configurations finalized (last: " + lastRefusal + ")";
    return p;
  }

private:
  cudnnBackendDescriptor_t own(cudnnBackendDescriptorType_t type) {
    owned.emplace_back(type);
    return owned.back().get();
  }

  void add(cudnnBackendDescriptor_t op, const char *what) {
    finalize(op, what);
    ops.push_back(op);
  }

  Tensor make(int64_t uid, cudnnDataType_t type, Dims dims, Dims strides,
              bool isVirtual, bool byValue) {
    cudnnBackendDescriptor_t desc = own(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16; // the frontend's, for every tensor
    setAttr(desc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    setAttr(desc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64,
            int64_t(dims.size()), dims.data());
    setAttr(desc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64,
            int64_t(strides.size()), strides.data());
    setAttr(desc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    setAttr(desc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1,
            &alignment);
    if (isVirtual)
      setAttr(desc, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1,
              &isVirtual);
    if (byValue)
      setAttr(desc, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1,
              &byValue);
    finalize(desc, "tensor descriptor");
    return Tensor{desc, std::move(dims), std::move(strides)};
  }

  /// Finalizes a descriptor cuDNN may decline for this graph; false (with
  /// the reason in the plan) when it does.
  bool tryFinalize(cudnnBackendDescriptor_t desc, const char *what, Plan &p) {
    cudnnStatus_t status = cudnnBackendFinalize(desc);
    if (status == CUDNN_STATUS_SUCCESS)
      return true;
    if (!notSupported(status))
      fatal(__func__, "finalizing %s: %s", what, describe(status).c_str());
    p.refusal = std::string(what) + " is not supported: " + describe(status);
    return false;
  }

  std::vector<Descriptor> owned;
  std::vector<cudnnBackendDescriptor_t> ops;
  int64_t nextVirtual = kFirstVirtual;
};

//===----------------------------------------------------------------------===//
// The attention graphs
//===----------------------------------------------------------------------===//

/// cuDNN's [b, h, s, d] views of loomrt's layouts. q, o, dq, do are
/// [B, Sq, Nq*D] and k, v, dk, dv [B, Skv, Nkv*D]; K^T (and V^T in the
/// backward) is the same memory with the last two dimensions swapped.
struct Views {
  explicit Views(const cudnn::AttentionShape &s) {
    const int64_t B = s.B, Nq = s.Nq, Nkv = s.Nkv, Sq = s.Sq, Skv = s.Skv,
                  D = s.D;
    io = s.dtype == LOOMRT_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    q = {B, Nq, Sq, D};
    qStrides = {Sq * Nq * D, D, Nq * D, 1};
    kv = {B, Nkv, Skv, D};
    kvStrides = {Skv * Nkv * D, D, Nkv * D, 1};
    kvT = {B, Nkv, D, Skv};
    kvTStrides = {Skv * Nkv * D, D, 1, Nkv * D};
    rows = {B, Nq, Sq, 1};
    rowStrides = {Nq * Sq, Sq, 1, 1};
    scores = {B, Nq, Sq, Skv};
    scoreStrides = {Nq * Sq * Skv, Sq * Skv, Skv, 1};
    scoresT = {B, Nq, Skv, Sq};
    scoreTStrides = {Nq * Sq * Skv, Sq * Skv, 1, Skv};
    qPacked = {Nq * Sq * D, Sq * D, D, 1};
    kvHeads = {B, Nq, Skv, D};
    kvHeadStrides = {Nq * Skv * D, Skv * D, D, 1};
  }
  cudnnDataType_t io;
  Dims q, qStrides, kv, kvStrides, kvT, kvTStrides;
  Dims rows, rowStrides;       // per query row: lse, row sums
  Dims scores, scoreStrides;   // [b, hq, s_q, s_kv]
  Dims scoresT, scoreTStrides; // the same, transposed: [b, hq, s_kv, s_q]
  Dims qPacked;                // packed [b, hq, s_q, d] strides (dQ in f32)
  Dims kvHeads, kvHeadStrides; // dK, dV per query head before the GQA sum
};

Plan buildForward(const cudnn::AttentionShape &s) {
  const Views v(s);
  Graph g;
  const Tensor q = g.tensor(kQ, v.io, v.q, v.qStrides);
  const Tensor kT = g.tensor(kK, v.io, v.kvT, v.kvTStrides);
  const Tensor val = g.tensor(kV, v.io, v.kv, v.kvStrides);
  const Tensor o = g.tensor(kO, v.io, v.q, v.qStrides);
  const Tensor stats = g.tensor(kStats, CUDNN_DATA_FLOAT, v.rows, v.rowStrides);
  const Tensor scale = g.scalar(kScale);

  // S = Q K^T (f32)
  Tensor scores = g.virt(CUDNN_DATA_FLOAT, v.scores, v.scoreStrides);
  g.matmul(q, kT, scores);
  // S *= scale
  scores = g.binary(CUDNN_POINTWISE_MUL, scores, scale);
  if (s.causal)
    scores = g.causalMask(scores, g.scalar(kMaskValue));

  // Softmax with its statistics (the frontend's composite softmax).
  // M = rowmax(S)
  const Tensor rowMax = g.virt(CUDNN_DATA_FLOAT, v.rows, v.rowStrides);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, scores, rowMax);
  // E = exp(S - M)
  const Tensor shifted = g.binary(CUDNN_POINTWISE_SUB, scores, rowMax);
  const Tensor e = g.unary(CUDNN_POINTWISE_EXP, shifted);
  // Z = rowsum(E)
  const Tensor z = g.virt(CUDNN_DATA_FLOAT, v.rows, v.rowStrides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  // Stats = M + log Z, the natural-log log-sum-exp
  const Tensor logZ = g.unary(CUDNN_POINTWISE_LOG, z);
  g.pointwise(CUDNN_POINTWISE_ADD, stats, rowMax, &logZ);
  // P = E / Z, in the io dtype (the second matmul's A operand)
  const Tensor p = g.like(e, v.io);
  g.pointwise(CUDNN_POINTWISE_DIV, p, e, &z);

  // O = P V
  g.matmul(p, val, o);
  return g.plan();
}

Plan buildBackward(const cudnn::AttentionShape &s) {
  const Views v(s);
  Graph g;
  const Tensor q = g.tensor(kQ, v.io, v.q, v.qStrides);
  const Tensor kT = g.tensor(kK, v.io, v.kvT, v.kvTStrides);
  const Tensor vT = g.tensor(kV, v.io, v.kvT, v.kvTStrides);
  const Tensor o = g.tensor(kO, v.io, v.q, v.qStrides);
  const Tensor stats = g.tensor(kStats, CUDNN_DATA_FLOAT, v.rows, v.rowStrides);
  const Tensor dO = g.tensor(kDO, v.io, v.q, v.qStrides);
  const Tensor dQ = g.tensor(kDQ, v.io, v.q, v.qStrides);
  const Tensor dK = g.tensor(kDK, v.io, v.kv, v.kvStrides);
  const Tensor dV = g.tensor(kDV, v.io, v.kv, v.kvStrides);
  const Tensor scale = g.scalar(kScale);
  const Tensor one = g.scalar(kOne);
  // grad = a b per query head; with GQA computed for every query head, then
  // summed over the heads that share a kv head.
  auto kvGradient = [&](const Tensor &a, const Tensor &b, const Tensor &grad) {
    if (s.Nq == s.Nkv) {
      g.matmul(a, b, grad);
      return;
    }
    const Tensor perHead = g.virt(v.io, v.kvHeads, v.kvHeadStrides);
    g.matmul(a, b, perHead);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, perHead, grad);
  };

  // rowSum = sum_d dO * O (f32, in the workspace as the frontend has it;
  // the product's odd strides are the frontend's too)
  const Tensor dOO = g.virt(CUDNN_DATA_FLOAT, v.q,
                            {s.Nq * s.Sq * s.D, s.Sq * s.D, s.Nq * s.D, 1});
  g.pointwise(CUDNN_POINTWISE_MUL, dOO, dO, &o);
  const Tensor dOORows = g.virt(CUDNN_DATA_FLOAT, v.rows, v.rowStrides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, dOO, dOORows);
  const Tensor rowSum =
      g.tensor(kRowSum, CUDNN_DATA_FLOAT, v.rows, v.rowStrides);
  g.pointwise(CUDNN_POINTWISE_MUL, rowSum, dOORows, &one); // * 1 (no dropout)

  // P = exp(Q K^T * scale - Stats), masked (f32)
  Tensor scores = g.virt(CUDNN_DATA_FLOAT, v.scores, v.scoreStrides);
  g.matmul(q, kT, scores);
  scores = g.binary(CUDNN_POINTWISE_MUL, scores, scale);
  scores = g.binary(CUDNN_POINTWISE_SUB, scores, stats);
  if (s.causal)
    scores = g.causalMask(scores, g.scalar(kMaskValue));
  const Tensor p = g.unary(CUDNN_POINTWISE_EXP, scores);

  // dV = P^T dO; with GQA over all query heads, then summed per kv head
  const Tensor pT = g.virt(v.io, v.scoresT, v.scoreTStrides);
  g.reshape(p, pT);
  kvGradient(pT, dO, dV);

  // dP = dO V^T (f32)
  const Tensor dP = g.virt(CUDNN_DATA_FLOAT, v.scores, v.scoreStrides);
  g.matmul(dO, vT, dP);
  // dS = (dP - rowSum) * P * scale
  Tensor dS = g.binary(CUDNN_POINTWISE_SUB, dP, rowSum);
  dS = g.binary(CUDNN_POINTWISE_MUL, dS, p);
  dS = g.binary(CUDNN_POINTWISE_MUL, dS, scale);

  // dK = dS^T Q; with GQA over all query heads, then summed per kv head
  const Tensor dST = g.virt(v.io, v.scoresT, v.scoreTStrides);
  g.reshape(dS, dST);
  kvGradient(dST, q, dK);

  // dQ = dS K, accumulated in f32 in the workspace, then converted. K is
  // K^T reshaped back; the frontend leaves that virtual output's type to
  // the f32 intermediate default.
  const Tensor k = g.virt(CUDNN_DATA_FLOAT, v.kv, v.kvStrides);
  g.reshape(kT, k);
  const Tensor dQAccum = g.tensor(kDQAccum, CUDNN_DATA_FLOAT, v.q, v.qPacked);
  g.matmul(dS, k, dQAccum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dQ, dQAccum);
  return g.plan();
}

/// The cached plan of a shape and direction, built on first use.
const Plan &planFor(bool backward, const cudnn::AttentionShape &s) {
  using Key = std::tuple<bool, int, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, bool>;
  // Never destroyed, like ctx(): freeing plans at exit could run after
  // CUDA's teardown.
  static auto &plans = *new std::map<Key, Plan>;
  LOOMRT_CHECK(device().handle, "cuDNN is unavailable (check covers())");
  const Key key{backward, int(s.dtype), s.B, s.Sq,    s.Skv,
                s.Nq,     s.Nkv,        s.D, s.causal};
  auto it = plans.find(key);
  if (it == plans.end())
    it =
        plans.emplace(key, backward ? buildBackward(s) : buildForward(s)).first;
  return it->second;
}

void execute(const Plan &p, const std::vector<int64_t> &uids,
             const std::vector<void *> &pointers, void *workspace) {
  Descriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  setAttr(pack.get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
          int64_t(uids.size()), uids.data());
  setAttr(pack.get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
          CUDNN_TYPE_VOID_PTR, int64_t(pointers.size()), pointers.data());
  setAttr(pack.get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
          &workspace);
  finalize(pack.get(), "variant pack");
  CUDNN_CHECK(cudnnBackendExecute(device().handle, p.plan, pack.get()));
}

int64_t roundUp(int64_t bytes) { return (bytes + 255) / 256 * 256; }

} // namespace

bool loomrt::cudnn::aligned(std::initializer_list<const void *> pointers) {
  for (const void *ptr : pointers)
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0)
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

bool loomrt::cudnn::available(std::string *why) {
  const Device &dev = device();
  if (!dev.handle && why)
    *why = dev.unavailable;
  return dev.handle != nullptr;
}

bool loomrt::cudnn::covers(const AttentionShape &s) {
  if (s.dtype != LOOMRT_BF16 && s.dtype != LOOMRT_F16)
    return false;
  if (s.D <= 0 || s.D % 8 != 0 || s.Nkv <= 0 || s.Nq % s.Nkv != 0)
    return false;
  if (s.Sq == 1 && s.Skv == 1) // no backward engine
    return false;
  const Device &dev = device();
  if (!dev.handle)
    return false;
  // Known-bad releases for f16/bf16 SDPA, forward and backward.
  if (dev.version == 91000 || dev.version == 91001)
    return false;
  // Up to 9.15.0 the frontend adds a padding mask to the backward when s_kv
  // is not a multiple of 128 (an engine bug); this graph has none.
  if (dev.version <= 91500 && s.Skv % 128 != 0)
    return false;
  // The backward's head-dim limit (the forward's is never lower): 256 on
  // Hopper, 128 elsewhere.
  return s.D <= (dev.major == 9 ? 256 : 128);
}

bool loomrt::cudnn::forward(const AttentionShape &s, const void *q,
                            const void *k, const void *v, void *o, float *lse,
                            std::string *why) {
  LOOMRT_CHECK(aligned({q, k, v, o, lse}),
               "a tensor is not 16-byte aligned (cudnn::aligned)");
  const Plan &p = planFor(false, s);
  if (!p.plan) {
    if (why)
      *why = p.refusal;
    return false;
  }
  float scale = s.scale;
  std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale};
  std::vector<void *> pointers{const_cast<void *>(q),
                               const_cast<void *>(k),
                               const_cast<void *>(v),
                               o,
                               lse,
                               &scale};
  if (s.causal) {
    uids.push_back(kMaskValue);
    pointers.push_back(maskValue());
  }
  Scratch workspace(p.workspace);
  execute(p, uids, pointers, workspace.as<void>());
  return true;
}

bool loomrt::cudnn::backward(const AttentionShape &s, const void *q,
                             const void *k, const void *v, const void *o,
                             const float *lse, const void *dout, void *dq,
                             void *dk, void *dv, std::string *why) {
  LOOMRT_CHECK(aligned({q, k, v, o, lse, dout, dq, dk, dv}),
               "a tensor is not 16-byte aligned (cudnn::aligned)");
  const Plan &p = planFor(true, s);
  if (!p.plan) {
    if (why)
      *why = p.refusal;
    return false;
  }
  // Workspace: the f32 dQ accumulator and row sums (the frontend's part),
  // then cuDNN's.
  const int64_t accumBytes = roundUp(s.B * s.Nq * s.Sq * s.D * 4);
  const int64_t rowSumBytes = roundUp(s.B * s.Nq * s.Sq * 4);
  Scratch workspace(accumBytes + rowSumBytes + p.workspace);
  char *base = workspace.as<char>();
  // Before 9.6 the engines expect the accumulator zeroed by the caller.
  if (device().version < 90600)
    CUDA_CHECK(cudaMemsetAsync(base, 0, size_t(accumBytes), stream()));
  float scale = s.scale, one = 1.0f;
  std::vector<int64_t> uids{kQ,  kK,  kV,     kO,   kStats,  kDO,     kDQ,
                            kDK, kDV, kScale, kOne, kRowSum, kDQAccum};
  std::vector<void *> pointers{const_cast<void *>(q),
                               const_cast<void *>(k),
                               const_cast<void *>(v),
                               const_cast<void *>(o),
                               const_cast<float *>(lse),
                               const_cast<void *>(dout),
                               dq,
                               dk,
                               dv,
                               &scale,
                               &one,
                               base + accumBytes,
                               base};
  if (s.causal) {
    uids.push_back(kMaskValue);
    pointers.push_back(maskValue());
  }
  execute(p, uids, pointers, base + accumBytes + rowSumBytes);
  return true;
}
