#include "audit/libpq.h"

#include <dlfcn.h>

#include <mutex>

#include "common/strings.h"

namespace pillar::audit {
namespace {

// Soname of Debian 12's libpq5; its ABI has been stable since PostgreSQL 8.
constexpr const char* kLibrary = "libpq.so.5";

template <typename T>
bool Resolve(void* handle, const char* name, T& out) {
  out = reinterpret_cast<T>(::dlsym(handle, name));
  return out != nullptr;
}

[[nodiscard]] absl::StatusOr<const Libpq*> LoadOnce() {
  void* handle = ::dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = ::dlerror();
    return absl::FailedPreconditionError(
        StrCat("PostgreSQL needs ", kLibrary,
               " (Debian package libpq5): ", error == nullptr ? "cannot load it" : error));
  }
  auto* pq = new Libpq;
  const char* missing = nullptr;
  auto need = [&](const char* name, auto& fn) {
    if (missing == nullptr && !Resolve(handle, name, fn)) missing = name;
  };
  need("PQconnectdb", pq->connectdb);
  need("PQstatus", pq->status);
  need("PQerrorMessage", pq->error_message);
  need("PQfinish", pq->finish);
  need("PQexec", pq->exec);
  need("PQexecParams", pq->exec_params);
  need("PQresultStatus", pq->result_status);
  need("PQclear", pq->clear);
  need("PQntuples", pq->ntuples);
  need("PQgetvalue", pq->getvalue);
  need("PQgetlength", pq->getlength);
  need("PQputCopyData", pq->put_copy_data);
  need("PQputCopyEnd", pq->put_copy_end);
  need("PQgetResult", pq->get_result);
  if (missing != nullptr) {
    delete pq;
    return absl::FailedPreconditionError(StrCat(kLibrary, " has no ", missing));
  }
  return pq;  // kept, with the library, for the life of the process
}

}  // namespace

absl::StatusOr<const Libpq*> Libpq::Load() {
  static std::once_flag once;
  static absl::StatusOr<const Libpq*>* loaded = nullptr;
  std::call_once(once, [] { loaded = new absl::StatusOr<const Libpq*>(LoadOnce()); });
  return *loaded;
}

}  // namespace pillar::audit
