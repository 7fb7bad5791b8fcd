#include "bench/mpi_communicator.h"

// The C API only: mpi.h would otherwise pull in the removed C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "bench/elements.h"
#include "common/strings.h"

namespace pillar::bench {
namespace {

[[nodiscard]] absl::Status MpiError(int code, std::string_view what) {
  if (code == MPI_SUCCESS) return absl::OkStatus();
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return absl::InternalError(StrCat(what, ": ", std::string_view(text, size_t(length))));
}

// Half and bfloat16 reductions in software: Open MPI has no 16-bit floating-point type.
// MPI user functions carry no context, so one function per (type, operator).
// One MPI call with its arguments bound.
template <typename Call>
class DirectCollective final : public BoundCollective {
 public:
  DirectCollective(std::string_view name, Call call) : name_(name), call_(std::move(call)) {}
  [[nodiscard]] absl::Status Run() override {
    const int code = call_();
    if (code == MPI_SUCCESS) return absl::OkStatus();
    return MpiError(code, name_);
  }

 private:
  std::string_view name_;
  Call call_;
};

template <typename Call>
std::unique_ptr<BoundCollective> Direct(std::string_view name, Call call) {
  return std::make_unique<DirectCollective<Call>>(name, std::move(call));
}

template <DataType kType, ReduceOp kOp>
void SoftReduce(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceInto(kType, kOp, inout, in, size_t(*len));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    // Errors come back as codes, not as an abort of the whole job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CreateSoftOps<DataType::kHalf>(half_ops_);
    CreateSoftOps<DataType::kBfloat16>(bf16_ops_);
  }
  ~MpiCommunicator() override {
    for (MPI_Op& op : half_ops_) MPI_Op_free(&op);
    for (MPI_Op& op : bf16_ops_) MPI_Op_free(&op);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string Describe() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string text(version, size_t(length));
    // "Open MPI v4.1.4, package: …": the name and version are enough.
    if (size_t comma = text.find(','); comma != std::string::npos) text.resize(comma);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    return StrCat("mpi: ", text);
  }

  [[nodiscard]] absl::Status Supports(Collective, DataType, ReduceOp) const override {
    return absl::OkStatus();  // every type; 16-bit floats are reduced in software
  }

  [[nodiscard]] absl::Status Run(const CollectiveCall& call) override {
    const MPI_Datatype type = Type(call.type);
    const int count = int(call.count);
    if (call.count > size_t(INT32_MAX)) {
      return absl::InvalidArgumentError("more than 2^31 elements per call (MPI's int count)");
    }
    const void* send = call.in_place ? MPI_IN_PLACE : call.send;
    const size_t width = DataTypeSize(call.type);
    int code = MPI_SUCCESS;
    switch (call.collective) {
      case Collective::kAllReduce:
        code = MPI_Allreduce(send, call.recv, count, type, Op(call), MPI_COMM_WORLD);
        break;
      case Collective::kAllGather:
        code = MPI_Allgather(send, count, type, call.recv, count, type, MPI_COMM_WORLD);
        break;
      case Collective::kReduceScatter:
        code = MPI_Reduce_scatter_block(send, call.recv, count, type, Op(call), MPI_COMM_WORLD);
        // In place, MPI leaves this rank's share at the start; NCCL (the convention) at its
        // own offset.
        if (code == MPI_SUCCESS && call.in_place && rank_ != 0) {
          std::byte* base = static_cast<std::byte*>(call.recv);
          std::memmove(base + size_t(rank_) * call.count * width, base, call.count * width);
        }
        break;
      case Collective::kBroadcast:
        // MPI broadcasts in place; out of place the root's input is copied over first.
        if (!call.in_place && rank_ == call.root && call.count > 0) {
          std::memcpy(call.recv, call.send, call.count * width);
        }
        code = MPI_Bcast(call.recv, count, type, call.root, MPI_COMM_WORLD);
        break;
      case Collective::kReduce:
        if (call.in_place && rank_ != call.root) send = call.recv;  // the input is there
        code = MPI_Reduce(send, call.recv, count, type, Op(call), call.root, MPI_COMM_WORLD);
        break;
      case Collective::kAllToAll:
        code = MPI_Alltoall(send, count, type, call.recv, count, type, MPI_COMM_WORLD);
        break;
      case Collective::kSendRecv: {
        const int next = (rank_ + 1) % size_, prev = (rank_ + size_ - 1) % size_;
        if (call.in_place) {
          code = MPI_Sendrecv_replace(call.recv, count, type, next, 0, prev, 0, MPI_COMM_WORLD,
                                      MPI_STATUS_IGNORE);
        } else {
          code = MPI_Sendrecv(call.send, count, type, next, 0, call.recv, count, type, prev, 0,
                              MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        }
        break;
      }
    }
    if (code != MPI_SUCCESS) return MpiError(code, CollectiveName(call.collective));
    // MPI has no average: a sum, divided where the result lands (as NCCL defines ncclAvg).
    if (call.op == ReduceOp::kAvg && Reduces(call.collective) &&
        (call.collective != Collective::kReduce || rank_ == call.root)) {
      std::byte* out = static_cast<std::byte*>(call.recv);
      if (call.collective == Collective::kReduceScatter && call.in_place) {
        out += size_t(rank_) * call.count * width;
      }
      DivideBy(call.type, out, call.count, size_);
    }
    return absl::OkStatus();
  }

  // The common cases as one direct MPI call with every argument resolved; those that need
  // work around the call (avg's division, in-place reduce-scatter's move, out-of-place
  // broadcast's copy) keep Run().
  std::unique_ptr<BoundCollective> Bind(const CollectiveCall& call) override {
    if (call.count > size_t(INT32_MAX) || (Reduces(call.collective) && call.op == ReduceOp::kAvg)) {
      return Communicator::Bind(call);
    }
    const MPI_Datatype type = Type(call.type);
    const int count = int(call.count);
    const void* send = call.in_place ? MPI_IN_PLACE : call.send;
    void* recv = call.recv;
    const MPI_Op op = Op(call);
    const int root = call.root;
    switch (call.collective) {
      case Collective::kAllReduce:
        return Direct(CollectiveName(call.collective),
                      [=] { return MPI_Allreduce(send, recv, count, type, op, MPI_COMM_WORLD); });
      case Collective::kAllGather:
        return Direct(CollectiveName(call.collective), [=] {
          return MPI_Allgather(send, count, type, recv, count, type, MPI_COMM_WORLD);
        });
      case Collective::kAllToAll:
        return Direct(CollectiveName(call.collective), [=] {
          return MPI_Alltoall(send, count, type, recv, count, type, MPI_COMM_WORLD);
        });
      case Collective::kReduce:
        if (call.in_place && rank_ != root) send = recv;
        return Direct(CollectiveName(call.collective), [=] {
          return MPI_Reduce(send, recv, count, type, op, root, MPI_COMM_WORLD);
        });
      case Collective::kReduceScatter:
        if (call.in_place) break;
        return Direct(CollectiveName(call.collective), [=] {
          return MPI_Reduce_scatter_block(send, recv, count, type, op, MPI_COMM_WORLD);
        });
      case Collective::kBroadcast:
        if (!call.in_place) break;
        return Direct(CollectiveName(call.collective),
                      [=] { return MPI_Bcast(recv, count, type, root, MPI_COMM_WORLD); });
      case Collective::kSendRecv:
        break;
    }
    return Communicator::Bind(call);
  }

  [[nodiscard]] absl::Status Barrier() override {
    return MpiError(MPI_Barrier(MPI_COMM_WORLD), "barrier");
  }

  [[nodiscard]] absl::StatusOr<double> Combine(double value, ReduceOp op) override {
    double out = 0;
    const MPI_Op mpi_op = op == ReduceOp::kMin ? MPI_MIN : op == ReduceOp::kMax ? MPI_MAX : MPI_SUM;
    if (absl::Status s =
            MpiError(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, mpi_op, MPI_COMM_WORLD), "combine");
        !s.ok()) {
      return s;
    }
    return out;
  }

  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Gather(std::string_view mine) override {
    constexpr size_t kSlot = 256;
    char slot[kSlot] = {};
    std::memcpy(slot, mine.data(), std::min(mine.size(), kSlot - 1));
    std::vector<char> all(kSlot * size_t(size_));
    if (absl::Status s = MpiError(MPI_Allgather(slot, int(kSlot), MPI_CHAR, all.data(), int(kSlot),
                                                MPI_CHAR, MPI_COMM_WORLD),
                                  "gather");
        !s.ok()) {
      return s;
    }
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) out.emplace_back(all.data() + size_t(r) * kSlot);
    return out;
  }

 private:
  template <DataType kType>
  static void CreateSoftOps(MPI_Op (&ops)[4]) {
    MPI_Op_create(&SoftReduce<kType, ReduceOp::kSum>, 1, &ops[0]);
    MPI_Op_create(&SoftReduce<kType, ReduceOp::kProd>, 1, &ops[1]);
    MPI_Op_create(&SoftReduce<kType, ReduceOp::kMax>, 1, &ops[2]);
    MPI_Op_create(&SoftReduce<kType, ReduceOp::kMin>, 1, &ops[3]);
  }

  static MPI_Datatype Type(DataType t) {
    switch (t) {
      case DataType::kInt8:
        return MPI_INT8_T;
      case DataType::kUint8:
        return MPI_UINT8_T;
      case DataType::kInt32:
        return MPI_INT32_T;
      case DataType::kUint32:
        return MPI_UINT32_T;
      case DataType::kInt64:
        return MPI_INT64_T;
      case DataType::kUint64:
        return MPI_UINT64_T;
      case DataType::kHalf:
      case DataType::kBfloat16:
        return MPI_UINT16_T;  // moved as bits, reduced by SoftReduce
      case DataType::kFloat:
        return MPI_FLOAT;
      case DataType::kDouble:
        return MPI_DOUBLE;
    }
    return MPI_BYTE;
  }

  MPI_Op Op(const CollectiveCall& call) const {
    int index = 0;
    switch (call.op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        index = 0;
        break;
      case ReduceOp::kProd:
        index = 1;
        break;
      case ReduceOp::kMax:
        index = 2;
        break;
      case ReduceOp::kMin:
        index = 3;
        break;
    }
    if (call.type == DataType::kHalf) return half_ops_[index];
    if (call.type == DataType::kBfloat16) return bf16_ops_[index];
    // const, not constexpr: Open MPI's handles are casts of addresses, which clang refuses
    // in a constant expression.
    static const MPI_Op kBuiltIn[] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
    return kBuiltIn[index];
  }

  int rank_ = 0;
  int size_ = 1;
  MPI_Op half_ops_[4] = {};
  MPI_Op bf16_ops_[4] = {};
};

}  // namespace

[[nodiscard]] absl::StatusOr<std::unique_ptr<Communicator>> OpenMpiCommunicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided);
        code != MPI_SUCCESS) {
      return MpiError(code, "MPI_Init");
    }
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  return std::unique_ptr<Communicator>(new MpiCommunicator());
}

}  // namespace pillar::bench
