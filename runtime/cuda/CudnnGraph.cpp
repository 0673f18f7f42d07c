//===- CudnnGraph.cpp - The cuDNN graphs of fused attention ----*- C++ -*-===//
//
// The operation graphs of scaled dot-product attention, forward with its
// log-sum-exp and backward, for cuDNN's fused flash-attention engines.
// cudnn_frontend is not packaged for this platform, so the graphs are built
// here with the raw cuDNN 9 backend API, node for node as cudnn_frontend
// 1.x builds its composite SDPA graphs for cuDNN 9 below 9.21
// (CompositeSDPANode, CompositeSDPABackwardNode, CompositeSoftmaxNode and
// CompositeDiagonalBandMaskNode): the fused engines recognize those graph
// patterns, so the data types, virtual tensors and by-value scalars follow
// the frontend exactly.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudnnGraph.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

using namespace loomrt;
using namespace loomrt::cudnn;

/// cuDNN's name for a status and, when it has one, its message about the
/// failure just seen on this thread.
std::string loomrt::cudnn::describe(cudnnStatus_t status) {
  char detail[512] = "";
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string text = cudnnGetErrorString(status);
  if (detail[0])
    text += std::string(": ") + detail;
  return text;
}

void loomrt::cudnn::setAttr(cudnnBackendDescriptor_t desc,
                            cudnnBackendAttributeName_t name,
                            cudnnBackendAttributeType_t type, int64_t count,
                            const void *values) {
  cudnnStatus_t status =
      cudnnBackendSetAttribute(desc, name, type, count, values);
  if (status != CUDNN_STATUS_SUCCESS)
    fatal(__func__, "cudnnBackendSetAttribute(attribute %d): %s", int(name),
          describe(status).c_str());
}

void loomrt::cudnn::finalize(cudnnBackendDescriptor_t desc, const char *what) {
  cudnnStatus_t status = cudnnBackendFinalize(desc);
  if (status != CUDNN_STATUS_SUCCESS)
    fatal(__func__, "finalizing the %s: %s", what, describe(status).c_str());
}

namespace {

/// Whether cuDNN declined (a graph, a heuristics query, an engine
/// configuration) rather than failed.
bool notSupported(cudnnStatus_t status) {
  return CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED;
}

void setDesc(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
             cudnnBackendDescriptor_t value) {
  setAttr(desc, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
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

/// Builds one operation graph; every descriptor it creates lives in it (and
/// then in the plan).
class Graph {
public:
  /// For cuDNN `version` (cudnnGetVersion()): some attributes are newer.
  explicit Graph(size_t version) : version(version) {}

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
    if (version >= 91100) {
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
  /// configuration that finalizes; without a handle, the operation graph
  /// alone.
  Plan plan(cudnnHandle_t handle) {
    Plan p;
    cudnnBackendDescriptor_t graph =
        own(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (handle)
      setAttr(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1,
              &handle);
    setAttr(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
            int64_t(ops.size()), ops.data());
    if (!tryFinalize(graph, "the operation graph", p))
      return p;
    p.graphFinalized = true;
    if (!handle) {
      p.refusal = "no device handle: the operation graph alone was checked";
      return p;
    }

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

  size_t version;
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
  explicit Views(const AttentionShape &s) {
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

/// S = Q K^T * scale (f32), how both directions begin.
Tensor scaledScores(Graph &g, const Views &v, const Tensor &q, const Tensor &kT,
                    const Tensor &scale) {
  const Tensor scores = g.virt(CUDNN_DATA_FLOAT, v.scores, v.scoreStrides);
  g.matmul(q, kT, scores);
  return g.binary(CUDNN_POINTWISE_MUL, scores, scale);
}

Plan buildForward(const AttentionShape &s, size_t version,
                  cudnnHandle_t handle) {
  const Views v(s);
  Graph g(version);
  const Tensor q = g.tensor(kQ, v.io, v.q, v.qStrides);
  const Tensor kT = g.tensor(kK, v.io, v.kvT, v.kvTStrides);
  const Tensor val = g.tensor(kV, v.io, v.kv, v.kvStrides);
  const Tensor o = g.tensor(kO, v.io, v.q, v.qStrides);
  const Tensor stats = g.tensor(kStats, CUDNN_DATA_FLOAT, v.rows, v.rowStrides);
  const Tensor scale = g.scalar(kScale);

  Tensor scores = scaledScores(g, v, q, kT, scale);
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
  return g.plan(handle);
}

Plan buildBackward(const AttentionShape &s, size_t version,
                   cudnnHandle_t handle) {
  const Views v(s);
  Graph g(version);
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
  Tensor scores = scaledScores(g, v, q, kT, scale);
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
  return g.plan(handle);
}

} // namespace

Plan loomrt::cudnn::buildPlan(bool backward, const AttentionShape &s,
                              size_t version, cudnnHandle_t handle) {
  return backward ? buildBackward(s, version, handle)
                  : buildForward(s, version, handle);
}
