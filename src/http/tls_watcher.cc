#include "http/tls_watcher.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <utility>

#include "common/strings.h"
#include "common/thread_name.h"
#include "http/revocation.h"
#include "http/tls_context.h"

namespace pillar::http::internal {
namespace {

namespace ssl = boost::asio::ssl;

// How long a refused change that stays as it is waits at most before it is tried again.
constexpr absl::Duration kLongestRetry = absl::Seconds(30);

// `why` without the "listener 'NAME': " that some checks put first.
std::string WithoutListener(std::string_view why, const std::string& name) {
  if (const std::string prefix = StrCat("listener '", name, "': "); why.starts_with(prefix)) {
    why.remove_prefix(prefix.size());
  }
  return std::string(why);
}

}  // namespace

bool BothVerifyClients(const ListenerOptions& a, const ListenerOptions& b) {
  using Certificates = ListenerOptions::ClientCertificates;
  return a.client_certificates != Certificates::kNone &&
         b.client_certificates != Certificates::kNone;
}

[[nodiscard]] absl::Status CheckSharedReload(const std::list<Listener>& listeners,
                                             const ListenerOptions& options) {
  for (const Listener& other : listeners) {
    if (BothVerifyClients(other.options, options) &&
        other.options.tls_reload != options.tls_reload) {
      return absl::InvalidArgumentError(StrCat(
          "listeners '", other.options.name, "' and '", options.name,
          "' both verify client certificates, so they read their TLS files again together: give "
          "them the same tls_reload_ms"));
    }
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::Status CheckStartingCrls(const std::list<Listener>& listeners,
                                             const ListenerOptions& options, SSL_CTX* made) {
  if (!options.client_crl.empty()) {
    const FileStamp crl = StampOf(options.client_crl);
    for (const Listener& other : listeners) {
      if (!other.tls || other.options.client_crl.empty()) continue;
      const FileStamp theirs = StampOf(other.options.client_crl);
      if (crl.inode != 0 && crl.device == theirs.device && crl.inode == theirs.inode &&
          !SameCrls(other.tls->Get().context->native_handle(), made)) {
        return absl::UnavailableError(
            StrCat("listener '", options.name, "': client_crl ", options.client_crl,
                   " changed while the listeners read it: start pillar again"));
      }
    }
  }
  return absl::OkStatus();
}

TlsWatcher::TlsWatcher(std::list<Listener>& listeners, Core& core) : core_(core) {
  for (Listener& listener : listeners) {
    if (!listener.tls || listener.options.tls_reload <= absl::ZeroDuration()) continue;
    auto shared = std::find_if(groups_.begin(), groups_.end(), [&](const Group& group) {
      return BothVerifyClients(group.members.front()->options, listener.options);
    });
    if (shared != groups_.end()) {
      shared->members.push_back(&listener);
      continue;
    }
    Group& group = groups_.emplace_back();
    group.members.push_back(&listener);
    group.every = listener.options.tls_reload;
    group.backoff = group.every;
  }
}

TlsWatcher::~TlsWatcher() { Stop(); }

void TlsWatcher::Start() {
  if (groups_.empty()) return;
  const absl::Time now = absl::Now();
  for (Group& group : groups_) group.next = now + group.every;
  thread_ = std::thread([this] {
    NameThisThread("tls-watcher");
    Run();
  });
}

void TlsWatcher::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void TlsWatcher::Run() {
  absl::MutexLock lock(&mu_);
  while (!stopping_) {
    absl::Time next = absl::InfiniteFuture();
    for (const Group& group : groups_) next = std::min(next, group.next);
    mu_.AwaitWithDeadline(absl::Condition(&stopping_), next);
    if (stopping_) break;
    mu_.Unlock();
    const absl::Time now = absl::Now();
    for (Group& group : groups_) {
      if (now < group.next) continue;
      group.next = now + group.every;
      Check(group, now);
    }
    mu_.Lock();
  }
}

void TlsWatcher::Check(Group& group, absl::Time now) {
  std::vector<TlsFileStamps> stamps;  // taken before the files are read
  bool changed = false;
  for (Listener* listener : group.members) {
    stamps.push_back(StampTlsFiles(listener->options));
    changed = changed || stamps.back() != listener->tls->stamps();
  }
  if (!changed) {  // as in use (a refused change was undone)
    group.refused_stamps.clear();
    group.refused_why.clear();
    return;
  }
  if (stamps == group.refused_stamps && now < group.retry) return;
  std::vector<std::shared_ptr<ssl::context>> made;
  for (Listener* listener : group.members) {
    const std::string& name = listener->options.name;
    absl::StatusOr<std::shared_ptr<ssl::context>> context = MakeTlsContext(listener->options);
    absl::Status checked = context.status();
    if (checked.ok()) {
      checked = listener->tls->crl_history().CheckNotOlder((*context)->native_handle());
      // The marks cannot be read (the state store failed): this process's history was checked,
      // and a revocation matters more than a replay across a restart; said, not refused.
      if (checked.code() == absl::StatusCode::kUnavailable) {
        std::fprintf(stderr, "pillar: listener '%s': %.*s\n", name.c_str(),
                     int(checked.message().size()), checked.message().data());
        checked = absl::OkStatus();
      }
    }
    if (!checked.ok()) {
      const std::string_view why(checked.message().data(), checked.message().size());
      return Refuse(group, std::move(stamps), name, WithoutListener(why, name), now);
    }
    made.push_back(*std::move(context));
  }
  // A file that changed while the members read it (renamed into place between two of them) may
  // have given them different versions: read again at the next look (found by review
  // helper-66), nothing said.
  for (size_t i = 0; i < group.members.size(); ++i) {
    if (StampTlsFiles(group.members[i]->options) != stamps[i]) return;
  }
  // Members that read one CRL file (one inode when stamped) must have read the same lists: one
  // that read it before a new version landed and one after would part ways (found by review
  // helper-65). The files are changing: read again at the next look, nothing said.
  for (size_t i = 1; i < made.size(); ++i) {
    const FileStamp& first = stamps[0].client_crl;
    const FileStamp& crl = stamps[i].client_crl;
    if (crl.inode != 0 && crl.device == first.device && crl.inode == first.inode &&
        !SameCrls(made[0]->native_handle(), made[i]->native_handle())) {
      return;
    }
  }
  // A member whose files were rewritten with the same content (a touch, a fetch of an unchanged
  // CRL) keeps its context, and no connection of it needs to close.
  for (size_t i = 0; i < group.members.size(); ++i) {
    Listener& listener = *group.members[i];
    std::string digest = ContextDigest(made[i]->native_handle());
    if (digest == listener.tls->digest()) {
      listener.tls->set_stamps(stamps[i]);
      continue;
    }
    PublishTlsExpiry(listener.options, made[i]->native_handle(), core_.stats.tls_expiry);
    if (absl::Status kept = listener.tls->Replace(std::move(made[i]), stamps[i], std::move(digest));
        !kept.ok()) {
      std::fprintf(stderr, "pillar: listener '%s': %.*s\n", listener.options.name.c_str(),
                   int(kept.message().size()), kept.message().data());
    }
    if (core_.stats.tls_reloads) {
      core_.stats.tls_reloads->Get({listener.options.name, "reloaded"}).Increment();
    }
    std::fprintf(stderr,
                 "pillar: listener '%s': TLS files reloaded: new connections use them; a "
                 "connection made before closes after its next answer (its client checked again "
                 "first if the client CAs or CRLs changed)\n",
                 listener.options.name.c_str());
  }
  group.refused_stamps.clear();
  group.refused_why.clear();
  group.backoff = group.every;
}

void TlsWatcher::Refuse(Group& group, std::vector<TlsFileStamps> stamps, const std::string& name,
                        const std::string& reason, absl::Time now) {
  std::string why = StrCat(name, "\n", reason);
  const bool again = stamps == group.refused_stamps && why == group.refused_why;
  group.backoff =
      again ? std::min(group.backoff * 2, std::max(kLongestRetry, group.every)) : group.every;
  group.retry = now + group.backoff;
  if (again) return;
  for (Listener* listener : group.members) {
    if (core_.stats.tls_reloads) {
      core_.stats.tls_reloads->Get({listener->options.name, "refused"}).Increment();
    }
  }
  std::fprintf(stderr,
               "pillar: listener '%s': its TLS files changed but cannot be used, the ones read "
               "before stay in use%s: %s (tried again while they stay so)\n",
               name.c_str(),
               group.members.size() > 1 ? " on every listener that shares its client files" : "",
               reason.c_str());
  group.refused_stamps = std::move(stamps);
  group.refused_why = std::move(why);
}

}  // namespace pillar::http::internal
