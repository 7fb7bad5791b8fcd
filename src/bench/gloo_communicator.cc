#include "bench/gloo_communicator.h"

#include <unistd.h>

#include <charconv>
#include <cstring>
#include <exception>
#include <map>
#include <tuple>

#include "bench/elements.h"
#include "common/strings.h"
#include "gloo/algorithm.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/config.h"
#include "gloo/math.h"
#include "gloo/reduce.h"
#include "gloo/reduce_scatter.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/redis_store.h"
#include "gloo/transport/tcp/device.h"

namespace pillar::bench {
namespace {

// 16-bit floats travel as their bits and are reduced here (Gloo's own float16 has no
// bfloat16 sibling, and one code path for both keeps the check's arithmetic in one place).
template <ReduceOp kOp, uint16_t (*kTo)(float), float (*kFrom)(uint16_t)>
void Reduce16(uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = kFrom(a[i]), y = kFrom(b[i]);
    float r = x + y;
    if constexpr (kOp == ReduceOp::kProd) r = x * y;
    if constexpr (kOp == ReduceOp::kMax) r = x > y ? x : y;
    if constexpr (kOp == ReduceOp::kMin) r = x < y ? x : y;
    a[i] = kTo(r);
  }
}

// The element type Gloo sees, and its reduction functions in both of Gloo's shapes: the
// option-style collectives take c = a op b, the algorithm classes a op= b.
template <typename T>
struct Native {
  using Elem = T;
  using Binary = void (*)(void*, const void*, const void*, size_t);
  using Unary = void (*)(Elem*, const Elem*, size_t);
  static Unary ToUnary(ReduceOp op) {
    switch (op) {
      case ReduceOp::kProd:
        return &gloo::product<T>;
      case ReduceOp::kMax:
        return &gloo::max<T>;
      case ReduceOp::kMin:
        return &gloo::min<T>;
      default:
        return &gloo::sum<T>;
    }
  }
};

template <uint16_t (*kTo)(float), float (*kFrom)(uint16_t)>
struct Soft16 {
  using Elem = uint16_t;
  using Unary = void (*)(Elem*, const Elem*, size_t);
  static Unary ToUnary(ReduceOp op) {
    switch (op) {
      case ReduceOp::kProd:
        return &Reduce16<ReduceOp::kProd, kTo, kFrom>;
      case ReduceOp::kMax:
        return &Reduce16<ReduceOp::kMax, kTo, kFrom>;
      case ReduceOp::kMin:
        return &Reduce16<ReduceOp::kMin, kTo, kFrom>;
      default:
        return &Reduce16<ReduceOp::kSum, kTo, kFrom>;
    }
  }
};
using Half16 = Soft16<&HalfFromFloat, &FloatFromHalf>;
using Bf16 = Soft16<&Bfloat16FromFloat, &FloatFromBfloat16>;

template <typename Fn>
auto Dispatch(DataType type, Fn&& fn) {
  switch (type) {
    case DataType::kInt8:
      return fn(Native<int8_t>{});
    case DataType::kUint8:
      return fn(Native<uint8_t>{});
    case DataType::kInt32:
      return fn(Native<int32_t>{});
    case DataType::kUint32:
      return fn(Native<uint32_t>{});
    case DataType::kInt64:
      return fn(Native<int64_t>{});
    case DataType::kUint64:
      return fn(Native<uint64_t>{});
    case DataType::kHalf:
      return fn(Half16{});
    case DataType::kFloat:
      return fn(Native<float>{});
    case DataType::kDouble:
      return fn(Native<double>{});
    case DataType::kBfloat16:
      return fn(Bf16{});
  }
  return fn(Native<float>{});
}

// c = a op b from a op= b, for the option-style collectives.
template <typename Traits>
std::function<void(void*, const void*, const void*, size_t)> BinaryOf(ReduceOp op) {
  using E = typename Traits::Elem;
  auto unary = Traits::ToUnary(op);
  return [unary](void* c, const void* a, const void* b, size_t n) {
    if (c != a) std::memmove(c, a, n * sizeof(E));
    unary(static_cast<E*>(c), static_cast<const E*>(b), n);
  };
}

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> context, std::string transport)
      : context_(std::move(context)), transport_(std::move(transport)) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  std::string Describe() const override {
    return StrCat("gloo ", GLOO_VERSION_MAJOR, ".", GLOO_VERSION_MINOR, ".", GLOO_VERSION_PATCH,
                  " over ", transport_);
  }

  [[nodiscard]] absl::Status Supports(Collective, DataType, ReduceOp) const override {
    return absl::OkStatus();  // 16-bit floats are reduced in software
  }

  [[nodiscard]] absl::Status Run(const CollectiveCall& call) override {
    // Gloo reports failures (a peer gone, a timeout) by throwing; nothing is thrown past here.
    try {
      return Dispatch(call.type, [&](auto traits) { return RunTyped<decltype(traits)>(call); });
    } catch (const std::exception& e) {
      return absl::UnavailableError(
          StrCat("gloo ", CollectiveName(call.collective), ": ", e.what()));
    }
  }

  [[nodiscard]] absl::Status Barrier() override {
    try {
      gloo::BarrierOptions options(context_);
      gloo::barrier(options);
      return absl::OkStatus();
    } catch (const std::exception& e) {
      return absl::UnavailableError(StrCat("gloo barrier: ", e.what()));
    }
  }

  [[nodiscard]] absl::StatusOr<double> Combine(double value, ReduceOp op) override {
    try {
      double out = value;
      gloo::AllreduceOptions options(context_);
      options.setOutput(&out, 1);
      options.setReduceFunction(BinaryOf<Native<double>>(op));
      gloo::allreduce(options);
      return out;
    } catch (const std::exception& e) {
      return absl::UnavailableError(StrCat("gloo combine: ", e.what()));
    }
  }

  [[nodiscard]] absl::StatusOr<std::vector<std::string>> Gather(std::string_view mine) override {
    constexpr size_t kSlot = 256;
    std::vector<char> slot(kSlot, '\0');
    std::memcpy(slot.data(), mine.data(), std::min(mine.size(), kSlot - 1));
    std::vector<char> all(kSlot * size_t(size()));
    try {
      gloo::AllgatherOptions options(context_);
      options.setInput(slot.data(), kSlot);
      options.setOutput(all.data(), all.size());
      gloo::allgather(options);
    } catch (const std::exception& e) {
      return absl::UnavailableError(StrCat("gloo gather: ", e.what()));
    }
    std::vector<std::string> out;
    for (int r = 0; r < size(); ++r) out.emplace_back(all.data() + size_t(r) * kSlot);
    return out;
  }

 private:
  template <typename Traits>
  [[nodiscard]] absl::Status RunTyped(const CollectiveCall& call) {
    using E = typename Traits::Elem;
    const size_t n = size_t(size());
    const size_t count = call.count;
    E* recv = static_cast<E*>(call.recv);
    E* send = const_cast<E*>(static_cast<const E*>(call.send));
    if (count == 0) return absl::OkStatus();
    switch (call.collective) {
      case Collective::kAllReduce: {
        gloo::AllreduceOptions options(context_);
        if (!call.in_place) options.setInput(send, count);
        options.setOutput(recv, count);
        options.setReduceFunction(BinaryOf<Traits>(call.op));
        gloo::allreduce(options);
        break;
      }
      case Collective::kAllGather: {
        gloo::AllgatherOptions options(context_);
        if (!call.in_place) options.setInput(send, count);  // in place: already in `recv`
        options.setOutput(recv, count * n);
        gloo::allgather(options);
        break;
      }
      case Collective::kReduceScatter: {
        // Gloo's halving-doubling reduce-scatter works in one buffer and leaves each rank's
        // share at its start: out of place, the input is copied in first; in place, the share
        // is moved to the rank's own offset, NCCL's layout (both timed, as they must be).
        if (!call.in_place) std::memcpy(recv, send, count * n * sizeof(E));
        ReduceScatterFor<Traits>(recv, count, call.op).run();
        if (call.in_place && rank() != 0) {
          std::memmove(recv + size_t(rank()) * count, recv, count * sizeof(E));
        }
        break;
      }
      case Collective::kBroadcast: {
        gloo::BroadcastOptions options(context_);
        options.setRoot(call.root);
        if (!call.in_place && rank() == call.root) options.setInput(send, count);
        options.setOutput(recv, count);
        gloo::broadcast(options);
        break;
      }
      case Collective::kReduce: {
        gloo::ReduceOptions options(context_);
        options.setRoot(call.root);
        if (!call.in_place) options.setInput(send, count);
        options.setOutput(recv, count);
        options.setReduceFunction(BinaryOf<Traits>(call.op));
        gloo::reduce(options);
        break;
      }
      case Collective::kAllToAll: {
        // Gloo's all-to-all needs two buffers: in place goes through a scratch copy.
        const E* input = send;
        if (call.in_place) {
          scratch_.resize(count * n * sizeof(E));
          std::memcpy(scratch_.data(), recv, count * n * sizeof(E));
          input = reinterpret_cast<const E*>(scratch_.data());
        }
        gloo::AlltoallOptions options(context_);
        options.setInput(const_cast<E*>(input), count * n);
        options.setOutput(recv, count * n);
        gloo::alltoall(options);
        break;
      }
      case Collective::kSendRecv: {
        const int next = (rank() + 1) % size(), prev = (rank() + size() - 1) % size();
        const size_t bytes = count * sizeof(E);
        void* source = send;
        if (call.in_place) {
          scratch_.resize(bytes);
          std::memcpy(scratch_.data(), recv, bytes);
          source = scratch_.data();
        }
        auto out = context_->createUnboundBuffer(source, bytes);
        auto in = context_->createUnboundBuffer(recv, bytes);
        constexpr uint64_t kSlot = 0x5e4d;
        in->recv(prev, kSlot);
        out->send(next, kSlot);
        if (!out->waitSend(context_->getTimeout()) || !in->waitRecv(context_->getTimeout())) {
          return absl::DeadlineExceededError("gloo sendrecv: timed out");
        }
        break;
      }
    }
    if (call.op == ReduceOp::kAvg && Reduces(call.collective) &&
        (call.collective != Collective::kReduce || rank() == call.root)) {
      E* out = recv;
      if (call.collective == Collective::kReduceScatter && call.in_place) {
        out += size_t(rank()) * count;
      }
      DivideBy(call.type, out, count, size());
    }
    return absl::OkStatus();
  }

  // The algorithm object allocates its buffers and pairs up its peers when built: built once
  // per (buffer, size, type, operator) and reused for every iteration of a row.
  template <typename Traits>
  gloo::Algorithm& ReduceScatterFor(typename Traits::Elem* buffer, size_t count, ReduceOp op) {
    using E = typename Traits::Elem;
    const auto key = std::make_tuple(static_cast<void*>(buffer), count, sizeof(E),
                                     reinterpret_cast<void*>(Traits::ToUnary(op)));
    if (reduce_scatter_ == nullptr || reduce_scatter_key_ != key) {
      reduce_scatter_.reset();
      auto fn = std::make_unique<gloo::ReductionFunction<E>>(gloo::CUSTOM, Traits::ToUnary(op));
      const std::vector<int> shares(static_cast<size_t>(size()), static_cast<int>(count));
      reduce_scatter_ = std::make_unique<gloo::ReduceScatterHalvingDoubling<E>>(
          context_, std::vector<E*>{buffer}, int(count * size_t(size())), shares, fn.get());
      reduction_ = std::shared_ptr<void>(
          fn.release(), [](void* p) { delete static_cast<gloo::ReductionFunction<E>*>(p); });
      reduce_scatter_key_ = key;
    }
    return *reduce_scatter_;
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::string transport_;
  std::vector<std::byte> scratch_;
  std::shared_ptr<void> reduction_;  // declared first: outlives reduce_scatter_, which uses it
  std::unique_ptr<gloo::Algorithm> reduce_scatter_;
  std::tuple<void*, size_t, size_t, void*> reduce_scatter_key_;
};

}  // namespace

[[nodiscard]] absl::StatusOr<std::unique_ptr<Communicator>> OpenGlooCommunicator(
    const GlooOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(StrCat("rank ", o.rank, " of ", o.size, " ranks"));
  }
  std::unique_ptr<gloo::rendezvous::Store> store;
  std::string_view url = o.rendezvous;
  try {
    if (url.starts_with("file:")) {
      const std::string dir(url.substr(5));
      if (dir.empty() || access(dir.c_str(), W_OK) != 0) {
        return absl::InvalidArgumentError(
            StrCat("--rendezvous ", url, ": not a writable directory (every rank must see it)"));
      }
      store = std::make_unique<gloo::rendezvous::FileStore>(dir);
    } else if (url.starts_with("redis://")) {
      std::string_view rest = url.substr(8);
      int port = 6379;
      std::string host(rest);
      if (size_t colon = rest.rfind(':'); colon != std::string_view::npos) {
        host = std::string(rest.substr(0, colon));
        std::string_view p = rest.substr(colon + 1);
        auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), port);
        if (ec != std::errc() || end != p.data() + p.size() || port <= 0 || port > 65535) {
          return absl::InvalidArgumentError(StrCat("--rendezvous ", url, ": bad port"));
        }
      }
      store = std::make_unique<gloo::rendezvous::RedisStore>(host, port);
    } else {
      return absl::InvalidArgumentError(
          "gloo needs --rendezvous file:/shared/dir or redis://host:port");
    }
    gloo::rendezvous::PrefixStore prefixed(o.job, *store);
    gloo::transport::tcp::attr attr;
    std::string transport;
    if (!o.iface.empty()) {
      attr.iface = o.iface;
      transport = StrCat("tcp (", o.iface, ")");
    } else {
      char host[256] = {};
      gethostname(host, sizeof(host) - 1);
      attr.hostname = host;
      transport = StrCat("tcp (", host, ")");
    }
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(o.rank, o.size);
    context->setTimeout(std::chrono::milliseconds(o.timeout_ms));
    context->connectFullMesh(prefixed, device);
    return std::unique_ptr<Communicator>(new GlooCommunicator(std::move(context), transport));
  } catch (const std::exception& e) {
    return absl::UnavailableError(StrCat("gloo rendezvous through ", url, ": ", e.what()));
  }
}

}  // namespace pillar::bench
