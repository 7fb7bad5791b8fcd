#include "models/model_repository.h"

#include <sys/stat.h>

#include <algorithm>
#include <system_error>

#include "common/files.h"
#include "common/strings.h"
#include "models/model_aliases.h"

namespace pillar::models {
namespace {

int64_t ModifiedNanos(const std::filesystem::path& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

}  // namespace

std::string VersionSubject(std::string_view model, int64_t version) {
  return StrCat(model, "/", version);
}

std::optional<int64_t> ParseVersion(std::string_view name) {
  if (name.empty() || name.size() > 18 || name[0] < '1' || name[0] > '9') return std::nullopt;
  int64_t v = 0;
  if (!ParseInt(name, &v) || v < 1 || v > kMaxVersion) return std::nullopt;
  return v;
}

std::vector<int64_t> VersionsIn(const std::filesystem::path& model_dir, std::error_code* error) {
  std::vector<int64_t> versions;
  std::error_code ec;
  std::filesystem::directory_iterator it(model_dir, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    const std::optional<int64_t> v = ParseVersion(it->path().filename().string());
    if (v && it->is_directory(type_ec) && !it->is_symlink(type_ec)) versions.push_back(*v);
  }
  if (error != nullptr) *error = ec;
  std::sort(versions.begin(), versions.end());
  return versions;
}

ModelRepository::ModelRepository(std::filesystem::path root, VersionPolicy default_policy,
                                 std::map<std::string, VersionPolicy> policies,
                                 AliasTrust alias_trust)
    : root_(std::move(root)),
      default_policy_(std::move(default_policy)),
      policies_(std::move(policies)),
      alias_trust_(std::move(alias_trust)) {}

ScanResult ModelRepository::Scan(const ModelAliasTargets* last_good) const {
  ScanResult result;
  std::error_code ec;
  std::vector<std::filesystem::path> model_dirs;
  std::filesystem::directory_iterator it(root_, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    if (it->is_directory(type_ec)) model_dirs.push_back(it->path());
  }
  if (ec) {
    const std::string message = StrCat("model store ", root_.string(), ": ", ec.message());
    if (IsResourceShortage(ec.value())) {
      result.unreadable = absl::ResourceExhaustedError(message);
      result.model_errors.emplace_back("", result.unreadable);
    } else {
      result.model_errors.emplace_back("", absl::NotFoundError(message));
    }
    return result;
  }
  std::sort(model_dirs.begin(), model_dirs.end());
  for (const std::filesystem::path& dir : model_dirs) {
    std::string name = dir.filename().string();
    if (!IsValidModelName(name)) {
      if (name[0] != '.') {
        result.model_errors.emplace_back(
            name, absl::InvalidArgumentError("not a valid model name; directory ignored"));
      }
      continue;
    }
    std::error_code listing;
    const std::vector<int64_t> available = VersionsIn(dir, &listing);
    if (listing && IsResourceShortage(listing.value())) {
      result.unreadable = absl::ResourceExhaustedError(
          StrCat("model ", name, ": ", dir.string(), ": ", listing.message()));
      result.model_errors.emplace_back(name, result.unreadable);
      return result;
    }
    auto policy = policies_.find(name);
    const VersionPolicy& chosen_policy =
        policy == policies_.end() ? default_policy_ : policy->second;
    std::vector<int64_t> chosen = chosen_policy.Select(available);
    absl::StatusOr<ModelAliases> read = ReadAliases(dir, name, alias_trust_);
    AliasTargets targets;
    if (read.ok()) {
      targets.insert(read->targets.begin(), read->targets.end());
    } else {
      result.model_errors.emplace_back(name, read.status());
      if (last_good != nullptr) {
        if (auto kept = last_good->find(name); kept != last_good->end()) targets = kept->second;
      }
    }
    for (const auto& [alias, version] : targets) {
      if (std::find(available.begin(), available.end(), version) == available.end()) {
        result.model_errors.emplace_back(
            name, absl::NotFoundError(StrCat("alias '", alias, "' names version ", version,
                                             ", which is not in the store")));
        continue;
      }
      result.aliases[name][alias] = version;
      if (std::find(chosen.begin(), chosen.end(), version) == chosen.end()) {
        chosen.push_back(version);
      }
    }
    std::sort(chosen.begin(), chosen.end());
    if (chosen.empty()) {
      result.model_errors.emplace_back(
          name,
          absl::NotFoundError(StrCat("no version matches policy ", chosen_policy.ToString())));
      continue;
    }
    for (int64_t v : chosen) {
      VersionEntry entry{name, v, dir / std::to_string(v), 0};
      entry.stamp =
          std::max({ModifiedNanos(entry.directory), ModifiedNanos(entry.directory / "model.toml"),
                    ModifiedNanos(entry.directory / "model.sig.json")});
      result.versions.push_back(std::move(entry));
    }
  }
  return result;
}

}  // namespace pillar::models
