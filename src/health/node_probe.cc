#include "health/node_probe.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/timex.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/files.h"
#include "common/strings.h"

namespace pillar::health {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

// "MemTotal:       16318480 kB" -> bytes.
bool MeminfoValue(std::string_view text, std::string_view key, uint64_t& bytes) {
  for (std::string_view line : Split(text, '\n')) {
    if (!line.starts_with(key) || line.size() <= key.size() || line[key.size()] != ':') continue;
    std::string_view rest = Trim(line.substr(key.size() + 1));
    uint64_t value = 0;
    size_t i = 0;
    for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9'; ++i)
      value = value * 10 + uint64_t(rest[i] - '0');
    if (i == 0) return false;
    bytes = Trim(rest.substr(i)) == "kB" ? value * 1024 : value;
    return true;
  }
  return false;
}

}  // namespace

std::string NodeProbe::Path(std::string_view absolute) const {
  if (root_ == "/" || root_.empty()) return std::string(absolute);
  return StrCat(root_, absolute);
}

absl::StatusOr<CpuFacts> NodeProbe::Cpu() const {
  absl::StatusOr<std::string> text = ReadSmallFile(Path("/proc/cpuinfo"), 64 << 20);
  if (!text.ok()) return text.status();
  CpuFacts cpu;
  for (std::string_view line : Split(*text, '\n')) {
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view key = Trim(line.substr(0, colon));
    if (key == "processor") ++cpu.logical;
    if (key == "model name" && cpu.model.empty())
      cpu.model = std::string(Trim(line.substr(colon + 1)));
  }
  if (cpu.logical == 0) {
    return absl::DataLossError(StrCat(Path("/proc/cpuinfo"), ": no processor entries"));
  }
  return cpu;
}

absl::StatusOr<MemoryFacts> NodeProbe::Memory() const {
  absl::StatusOr<std::string> text = ReadSmallFile(Path("/proc/meminfo"), 1 << 20);
  if (!text.ok()) return text.status();
  MemoryFacts memory;
  if (!MeminfoValue(*text, "MemTotal", memory.total_bytes)) {
    return absl::DataLossError(StrCat(Path("/proc/meminfo"), ": no MemTotal line"));
  }
  if (!MeminfoValue(*text, "SwapTotal", memory.swap_bytes)) {
    return absl::DataLossError(StrCat(Path("/proc/meminfo"), ": no SwapTotal line"));
  }
  return memory;
}

absl::StatusOr<std::string> NodeProbe::InterfaceState(std::string_view name) const {
  if (name.empty() || name.find('/') != std::string_view::npos || name == "." || name == "..") {
    return absl::InvalidArgumentError(StrCat("'", name, "' is not an interface name"));
  }
  absl::StatusOr<std::string> state =
      ReadSmallFile(Path(StrCat("/sys/class/net/", name, "/operstate")), 4096);
  if (!state.ok()) {
    return absl::NotFoundError(StrCat("no interface ", name));
  }
  return std::string(Trim(*state));
}

absl::StatusOr<ClockFacts> NodeProbe::Clock() const {
  struct timex tx;
  std::memset(&tx, 0, sizeof(tx));  // modes 0: read only
  const int state = adjtimex(&tx);
  if (state == -1) return absl::InternalError(StrCat("adjtimex: ", std::strerror(errno)));
  ClockFacts clock;
  clock.synchronized = state != TIME_ERROR && (tx.status & STA_UNSYNC) == 0;
  clock.max_error_ms = double(tx.maxerror) / 1000.0;  // microseconds
  return clock;
}

absl::StatusOr<DiskFacts> NodeProbe::Disk(const std::string& path) const {
  struct statvfs vfs;
  if (statvfs(path.c_str(), &vfs) != 0) {
    return absl::NotFoundError(StrCat(path, ": ", std::strerror(errno)));
  }
  return DiskFacts{.free_bytes = uint64_t(vfs.f_bavail) * uint64_t(vfs.f_frsize)};
}

absl::StatusOr<std::string> NodeProbe::KernelLog(const std::string& path) const {
  const std::string file = Path(path);
  // /dev/kmsg hands out one record per read and blocks at the end: read without blocking.
  const int fd = open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(StrCat(file, ": ", std::strerror(errno)));
  struct stat st;
  const bool records = fstat(fd, &st) == 0 && S_ISCHR(st.st_mode);  // /dev/kmsg
  std::string out;
  char buffer[8192];
  constexpr size_t kMax = 16 << 20;
  while (out.size() < kMax) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n > 0) {
      out.append(buffer, size_t(n));
      if (records && out.back() != '\n') out.push_back('\n');
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EPIPE) continue;  // kmsg: records overwritten while reading
    break;                                  // 0 (end of file) or EAGAIN (end of /dev/kmsg)
  }
  close(fd);
  return out;
}

}  // namespace pillar::health
