#include "bench/collective_options.h"

#include <cerrno>
#include <charconv>
#include <cstdlib>

#include "common/strings.h"

namespace pillar::bench {
namespace {

struct Flag {
  char short_name;
  std::string_view long_name;
  bool takes_value;
};

// nccl-tests' flags first, then pillar's (long only).
constexpr Flag kFlags[] = {
    {'b', "minbytes", true},
    {'e', "maxbytes", true},
    {'i', "stepbytes", true},
    {'f', "stepfactor", true},
    {'n', "iters", true},
    {'w', "warmup_iters", true},
    {'m', "agg_iters", true},
    {'c', "check", true},
    {'o', "op", true},
    {'d', "datatype", true},
    {'r', "root", true},
    {'a', "average", true},
    {'z', "blocking", true},
    {'N', "run_cycles", true},
    {'g', "ngpus", true},
    {'t', "nthreads", true},
    {'G', "cudagraph", true},
    {'p', "parallel_init", true},
    {'C', "report_cputime", true},
    {'R', "local_register", true},
    {'T', "timeout", true},
    {0, "backend", true},
    {0, "rendezvous", true},
    {0, "job", true},
    {0, "iface", true},
    {0, "rank", true},
    {0, "world-size", true},
    {0, "json", true},
    {0, "min-busbw", true},
    {0, "inject-fault", false},
};

[[nodiscard]] absl::StatusOr<long long> ParseInt(std::string_view flag, std::string_view text,
                                                 long long lo, long long hi) {
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) {
    return absl::InvalidArgumentError(StrCat(flag, ": '", text, "' is not an integer"));
  }
  if (value < lo || value > hi) {
    return absl::InvalidArgumentError(
        StrCat(flag, ": ", value, " is out of range [", lo, ", ", hi, "]"));
  }
  return value;
}

// Sets the option `flag` names from its value `v`.
// One function: a flat dispatch on every flag's name, one short branch each, reads best as
// one table beside kFlags.
[[nodiscard]] absl::Status Set(CollectiveOptions& o, const Flag& flag, std::string_view v) {
  const std::string name = flag.short_name != 0 ? StrCat("-", std::string(1, flag.short_name))
                                                : StrCat("--", flag.long_name);
  auto integer = [&](long long lo, long long hi) { return ParseInt(name, v, lo, hi); };
  auto size = [&]() -> absl::StatusOr<size_t> {
    absl::StatusOr<size_t> s = ParseByteSize(v);
    if (!s.ok()) return absl::InvalidArgumentError(StrCat(name, ": ", s.status().message()));
    return s;
  };
  auto refuse_unless = [&](long long wanted, std::string_view why) -> absl::Status {
    absl::StatusOr<long long> got = integer(0, 1 << 20);
    if (!got.ok()) return got.status();
    if (*got != wanted) {
      return absl::InvalidArgumentError(StrCat(name, " ", *got, ": ", why));
    }
    return absl::OkStatus();
  };
  const std::string_view l = flag.long_name;
  if (l == "minbytes" || l == "maxbytes" || l == "stepbytes") {
    absl::StatusOr<size_t> s = size();
    if (!s.ok()) return s.status();
    (l == "minbytes" ? o.min_bytes : l == "maxbytes" ? o.max_bytes : o.step_bytes) = *s;
    if (l == "stepbytes" && *s == 0) return absl::InvalidArgumentError("-i: must be positive");
    return absl::OkStatus();
  }
  if (l == "stepfactor" || l == "iters" || l == "warmup_iters" || l == "agg_iters" ||
      l == "run_cycles" || l == "root" || l == "average" || l == "check" || l == "blocking") {
    const long long lo = l == "stepfactor" || l == "iters" || l == "agg_iters" ? 1 : 0;
    const long long hi = l == "average" ? 3 : l == "check" || l == "blocking" ? 1 << 20 : 1 << 30;
    absl::StatusOr<long long> n = integer(lo, hi);
    if (!n.ok()) return n.status();
    if (l == "stepfactor") o.step_factor = size_t(*n);
    if (l == "iters") o.iters = int(*n);
    if (l == "warmup_iters") o.warmup_iters = int(*n);
    if (l == "agg_iters") o.agg_iters = int(*n);
    if (l == "run_cycles") o.cycles = int(*n);
    if (l == "root") o.root = int(*n);
    if (l == "average") o.average = int(*n);
    if (l == "check") o.check = *n != 0;
    if (l == "blocking") o.blocking = *n != 0;
    return absl::OkStatus();
  }
  if (l == "op") {
    if (v == "all") {
      o.ops.assign(std::begin(kAllReduceOps), std::end(kAllReduceOps));
      return absl::OkStatus();
    }
    std::optional<ReduceOp> op = ParseReduceOp(v);
    if (!op) {
      return absl::InvalidArgumentError(
          StrCat("-o: unknown operation '", v, "' (sum, prod, max, min, avg, all)"));
    }
    o.ops = {*op};
    return absl::OkStatus();
  }
  if (l == "datatype") {
    if (v == "all") {
      o.types.assign(std::begin(kAllDataTypes), std::end(kAllDataTypes));
      return absl::OkStatus();
    }
    std::optional<DataType> t = ParseDataType(v);
    if (!t) {
      return absl::InvalidArgumentError(StrCat(
          "-d: unknown type '", v,
          "' (int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16, all)"));
    }
    o.types = {*t};
    return absl::OkStatus();
  }
  if (l == "ngpus")
    return refuse_unless(1,
                         "one device per process is all a CPU backend has; start one rank per "
                         "device with mpirun instead");
  if (l == "nthreads")
    return refuse_unless(1,
                         "pillar runs one rank per process; start more ranks with mpirun instead");
  if (l == "cudagraph")
    return refuse_unless(0, "CUDA graphs need the NCCL backend, which this build has not");
  // -p and -C change nothing on a CPU backend: one rank per process has nothing to initialise
  // in parallel, and its times are the host's wall clock either way. Accepted, checked.
  if (l == "parallel_init" || l == "report_cputime") {
    absl::StatusOr<long long> n = integer(0, 1);
    return n.ok() ? absl::OkStatus() : n.status();
  }
  if (l == "local_register") return refuse_unless(0, "buffer registration needs the NCCL backend");
  if (l == "timeout") {
    return refuse_unless(0,
                         "a per-collective timeout is NCCL's; bound the run with the "
                         "launcher instead (mpirun --timeout, srun --time)");
  }
  if (l == "backend") {
    if (v != "mpi" && v != "gloo") {
      return absl::InvalidArgumentError(StrCat("--backend: '", v, "' is not mpi or gloo"));
    }
    o.backend = std::string(v);
    return absl::OkStatus();
  }
  if (l == "rendezvous") {
    o.rendezvous = std::string(v);
    return absl::OkStatus();
  }
  if (l == "job") {
    o.job = std::string(v);
    return absl::OkStatus();
  }
  if (l == "iface") {
    o.iface = std::string(v);
    return absl::OkStatus();
  }
  if (l == "rank" || l == "world-size") {
    absl::StatusOr<long long> n = integer(l == "rank" ? 0 : 1, 1 << 20);
    if (!n.ok()) return n.status();
    (l == "rank" ? o.rank : o.world_size) = int(*n);
    return absl::OkStatus();
  }
  if (l == "json") {
    o.json_path = std::string(v);
    return absl::OkStatus();
  }
  if (l == "min-busbw") {
    char* end = nullptr;
    const std::string text(v);
    const double bw = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(bw >= 0)) {
      return absl::InvalidArgumentError(
          StrCat("--min-busbw: '", v, "' is not a bandwidth in GB/s"));
    }
    o.min_busbw = bw;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(StrCat("unhandled flag ", name));
}

}  // namespace

[[nodiscard]] absl::StatusOr<size_t> ParseByteSize(std::string_view text) {
  if (text.empty()) return absl::InvalidArgumentError("an empty size");
  std::string_view digits = text;
  if (digits.back() == 'B' || digits.back() == 'b') digits.remove_suffix(1);
  unsigned shift = 0;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k':
        shift = 10;
        break;
      case 'M':
      case 'm':
        shift = 20;
        break;
      case 'G':
      case 'g':
        shift = 30;
        break;
      case 'T':
      case 't':
        shift = 40;
        break;
      default:
        break;
    }
    if (shift != 0) digits.remove_suffix(1);
  }
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size()) {
    return absl::InvalidArgumentError(StrCat("'", text, "' is not a size (e.g. 8, 64K, 32M, 16G)"));
  }
  if (shift != 0 && value > (UINT64_MAX >> shift)) {
    return absl::InvalidArgumentError(StrCat("'", text, "' is too large"));
  }
  return size_t(value << shift);
}

[[nodiscard]] absl::StatusOr<CollectiveOptions> ParseCollectiveArgs(
    const std::vector<std::string>& args, const char* min_bw_env) {
  CollectiveOptions o;
  bool have_collective = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') {
      if (have_collective) return absl::InvalidArgumentError(StrCat("unexpected '", arg, "'"));
      std::optional<Collective> c = ParseCollective(arg);
      if (!c) {
        return absl::InvalidArgumentError(StrCat(
            "unknown collective '", arg,
            "' (allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv)"));
      }
      o.collective = *c;
      have_collective = true;
      continue;
    }
    const Flag* flag = nullptr;
    std::optional<std::string> value;
    if (arg[1] == '-') {
      std::string_view name = std::string_view(arg).substr(2);
      if (size_t eq = name.find('='); eq != std::string_view::npos) {
        value = std::string(name.substr(eq + 1));
        name = name.substr(0, eq);
      }
      for (const Flag& f : kFlags) {
        if (f.long_name == name) flag = &f;
      }
    } else {
      for (const Flag& f : kFlags) {
        if (f.short_name == arg[1]) flag = &f;
      }
      if (flag != nullptr && arg.size() > 2) value = arg.substr(2);
    }
    if (flag == nullptr) {
      return absl::InvalidArgumentError(StrCat("unknown flag '", arg, "'"));
    }
    if (!flag->takes_value) {
      if (value) return absl::InvalidArgumentError(StrCat(arg, " takes no value"));
      o.inject_fault = true;
      continue;
    }
    if (!value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(StrCat(arg, " needs a value"));
      value = args[++i];
    }
    if (absl::Status s = Set(o, *flag, *value); !s.ok()) return s;
  }
  if (!have_collective) {
    return absl::InvalidArgumentError(
        "which collective? (allreduce, allgather, reducescatter, broadcast, reduce, alltoall, "
        "sendrecv)");
  }
  if (o.min_bytes > o.max_bytes) {
    return absl::InvalidArgumentError(
        StrCat("-b ", o.min_bytes, " is larger than -e ", o.max_bytes));
  }
  if (!o.min_busbw && min_bw_env != nullptr && *min_bw_env != '\0') {
    char* end = nullptr;
    const double bw = std::strtod(min_bw_env, &end);
    if (*end != '\0' || !(bw >= 0)) {
      return absl::InvalidArgumentError(
          StrCat("NCCL_TESTS_MIN_BW='", min_bw_env, "' is not a bandwidth in GB/s"));
    }
    o.min_busbw = bw;
  }
  return o;
}

std::string CollectiveUsage() {
  return R"(usage: pillar bench collective OP [flags]   (under mpirun, one rank per process)
OP: allreduce allgather reducescatter broadcast reduce alltoall sendrecv
nccl-tests flags:
  -b,--minbytes SIZE      smallest size (default 32M; K, M, G suffixes)
  -e,--maxbytes SIZE      largest size (default 32M)
  -i,--stepbytes SIZE     increment between sizes when -f is 1 (default 1M)
  -f,--stepfactor N       multiply the size by N between rows (default 1)
  -n,--iters N            timed iterations (default 20)
  -w,--warmup_iters N     untimed iterations first (default 1)
  -m,--agg_iters N        collectives per timed iteration (default 1)
  -c,--check 0|1          check every result element (default 1)
  -o,--op OP              sum prod max min avg all (default sum)
  -d,--datatype T         int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 all
  -r,--root N             root of broadcast and reduce (default 0)
  -a,--average 0..3       time reported: 0 rank 0's, 1 mean, 2 min, 3 max (default 1)
  -z,--blocking 0|1       accepted; CPU backends complete every call before returning
  -N,--run_cycles N       run the sweep N times, 0 until stopped (default 1)
  -p, -C 0|1              accepted (nothing to initialise in parallel; times are host time)
  -g, -t, -G, -R, -T      only their defaults (1, 1, 0, 0, 0) on CPU backends
pillar flags:
  --backend mpi|gloo      default: mpi when started by mpirun, gloo otherwise
  --rendezvous URL        gloo: file:/shared/dir or redis://host:port
  --job NAME              gloo: the rendezvous key prefix, one per run (default pillar)
  --iface NAME            gloo: the network interface to use (default: the host name's address)
  --rank N --world-size N gloo: this process's rank and the rank count (default: from
                          OMPI_COMM_WORLD_*, PMI_*, SLURM_PROCID/SLURM_NTASKS)
  --json FILE             also write the results as JSON
  --min-busbw GBPS        fail (exit 1) when the average bus bandwidth is lower; also
                          $NCCL_TESTS_MIN_BW
exit codes: 0 passed, 1 wrong results or bandwidth below --min-busbw, 2 could not run
)";
}

}  // namespace pillar::bench
