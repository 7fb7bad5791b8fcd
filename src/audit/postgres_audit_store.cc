#include "audit/postgres_audit_store.h"

#include "audit/audit_record.h"
#include "audit/libpq.h"
#include "common/strings.h"

namespace pillar::audit {
namespace {

// libpq's entry points; valid once Libpq::Load() succeeded, which ConnectTo checks: nothing here
// calls libpq before it has a connection.
const Libpq& Pq() { return **Libpq::Load(); }

// Guards against two processes creating the tables at once (CREATE TABLE IF NOT EXISTS races).
constexpr const char* kSchemaLockKey = "7426993105170251";

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS pillar_audit ("
    " instance text NOT NULL, seq bigint NOT NULL, payload text NOT NULL, chain text NOT NULL,"
    " PRIMARY KEY (instance, seq));"
    "CREATE TABLE IF NOT EXISTS pillar_audit_checkpoints ("
    " instance text PRIMARY KEY, payload text NOT NULL);";

// A PGresult that frees itself.
struct Result {
  explicit Result(PGresult* r) : r(r) {}
  ~Result() { Pq().clear(r); }
  Result(const Result&) = delete;
  Result& operator=(const Result&) = delete;
  bool Ok() const {
    const ExecStatusType s = Pq().result_status(r);
    return s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK;
  }
  PGresult* r;
};

[[nodiscard]] absl::Status PgError(PGconn* conn, std::string_view what) {
  std::string message = conn == nullptr ? "no connection" : Pq().error_message(conn);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  return absl::UnavailableError(StrCat("postgres: ", what, ": ", message));
}

[[nodiscard]] absl::Status Exec(PGconn* conn, const char* sql, std::string_view what) {
  Result r(Pq().exec(conn, sql));
  if (!r.Ok()) return PgError(conn, what);
  return absl::OkStatus();
}

[[nodiscard]] absl::StatusOr<PGconn*> ConnectTo(const std::string& conninfo) {
  if (absl::StatusOr<const Libpq*> pq = Libpq::Load(); !pq.ok()) return pq.status();
  PGconn* conn = Pq().connectdb(conninfo.c_str());
  if (Pq().status(conn) != CONNECTION_OK) {
    absl::Status s = PgError(conn, "cannot connect");
    Pq().finish(conn);
    return s;
  }
  return conn;
}

// COPY's text format: backslash, tab, newline and carriage return are escaped.
void AppendCopyField(std::string& out, std::string_view field) {
  for (char c : field) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        out += c;
    }
  }
}

[[nodiscard]] absl::StatusOr<std::string> PublishedCheckpoint(PGconn* conn,
                                                              const std::string& instance) {
  const char* params[] = {instance.c_str()};
  Result r(Pq().exec_params(conn,
                            "SELECT payload FROM pillar_audit_checkpoints WHERE instance = $1", 1,
                            nullptr, params, nullptr, nullptr, 0));
  if (!r.Ok()) return PgError(conn, "cannot read the checkpoint");
  if (Pq().ntuples(r.r) == 0) return absl::NotFoundError("no checkpoint");
  return std::string(Pq().getvalue(r.r, 0, 0), Pq().getlength(r.r, 0, 0));
}

}  // namespace

absl::StatusOr<std::unique_ptr<PostgresAuditStore>> PostgresAuditStore::Open(std::string conninfo,
                                                                             std::string instance) {
  std::unique_ptr<PostgresAuditStore> store(
      new PostgresAuditStore(std::move(conninfo), std::move(instance)));
  if (absl::Status s = store->Connect(); !s.ok()) return s;
  return store;
}

PostgresAuditStore::~PostgresAuditStore() {
  if (conn_ != nullptr) Pq().finish(conn_);
}

absl::Status PostgresAuditStore::Connect() {
  if (conn_ != nullptr && Pq().status(conn_) == CONNECTION_OK) return absl::OkStatus();
  if (conn_ != nullptr) {
    Pq().finish(conn_);
    conn_ = nullptr;
  }
  absl::StatusOr<PGconn*> conn = ConnectTo(conninfo_);
  if (!conn.ok()) return conn.status();
  conn_ = *conn;
  const std::string schema =
      StrCat("SET client_min_messages = warning; SELECT pg_advisory_lock(", kSchemaLockKey, ");",
             kSchema, "SELECT pg_advisory_unlock(", kSchemaLockKey, ");");
  if (absl::Status s = Exec(conn_, schema.c_str(), "cannot create the audit tables"); !s.ok()) {
    Pq().finish(conn_);
    conn_ = nullptr;
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<ChainHead> PostgresAuditStore::Begin() {
  if (absl::Status s = Connect(); !s.ok()) return s;
  if (absl::Status s = Exec(conn_, "BEGIN", "cannot begin"); !s.ok()) return s;
  const char* params[] = {instance_.c_str()};
  Result lock(Pq().exec_params(conn_, "SELECT pg_advisory_xact_lock(hashtext($1))", 1, nullptr,
                               params, nullptr, nullptr, 0));
  if (!lock.Ok()) {
    absl::Status s = PgError(conn_, "cannot lock the chain");
    Abort();
    return s;
  }
  Result last(Pq().exec_params(
      conn_,
      "SELECT seq, payload, chain FROM pillar_audit WHERE instance = $1 ORDER BY seq DESC LIMIT 2",
      1, nullptr, params, nullptr, nullptr, 0));
  if (!last.Ok()) {
    absl::Status s = PgError(conn_, "cannot read the chain's head");
    Abort();
    return s;
  }
  const int rows = Pq().ntuples(last.r);
  if (rows == 0) return ChainHead{};
  auto bad = [&](std::string_view what) {
    Abort();
    return absl::DataLossError(StrCat("audit chain ", instance_, " in postgres: the last record ",
                                      what, "; run `pillar audit verify`"));
  };
  int64_t seq = 0;
  Chain chain, previous{};
  std::string_view payload(Pq().getvalue(last.r, 0, 1), Pq().getlength(last.r, 0, 1));
  if (!ParseInt(std::string_view(Pq().getvalue(last.r, 0, 0)), &seq) ||
      !ParseChainHex(Pq().getvalue(last.r, 0, 2), &chain)) {
    return bad("is not a record");
  }
  if (rows == 2) {
    int64_t prior = 0;
    if (!ParseInt(std::string_view(Pq().getvalue(last.r, 1, 0)), &prior) || prior + 1 != seq ||
        !ParseChainHex(Pq().getvalue(last.r, 1, 2), &previous)) {
      return bad("does not follow the record before it");
    }
  } else if (seq != 0) {
    return bad("has no record before it");
  }
  if (hasher_.Link(previous, payload) != chain) return bad("does not match its hash");
  return ChainHead{.next_seq = seq + 1, .chain = chain};
}

absl::Status PostgresAuditStore::Commit(std::span<const EncodedRecord> records,
                                        std::string_view /*lines*/) {
  Result copy(Pq().exec(conn_, "COPY pillar_audit (instance, seq, payload, chain) FROM STDIN"));
  if (Pq().result_status(copy.r) != PGRES_COPY_IN) {
    absl::Status s = PgError(conn_, "cannot append");
    Abort();
    return s;
  }
  std::string rows;
  rows.reserve(records.size() * 400);
  for (const EncodedRecord& r : records) {
    AppendCopyField(rows, instance_);
    StrAppend(&rows, "\t", r.seq, "\t");
    AppendCopyField(rows, r.payload);
    StrAppend(&rows, "\t", ChainHex(r.chain), "\n");
  }
  if (Pq().put_copy_data(conn_, rows.data(), int(rows.size())) != 1 ||
      Pq().put_copy_end(conn_, nullptr) != 1) {
    absl::Status s = PgError(conn_, "cannot append");
    Abort();
    return s;
  }
  bool ok = true;
  while (PGresult* r = Pq().get_result(conn_)) {
    Result result(r);
    if (!result.Ok()) ok = false;
  }
  if (!ok) {
    absl::Status s = PgError(conn_, "cannot append");
    Abort();
    return s;
  }
  return Exec(conn_, "COMMIT", "cannot commit");
}

void PostgresAuditStore::Abort() {
  if (conn_ != nullptr) Result r(Pq().exec(conn_, "ROLLBACK"));
}

absl::Status PostgresAuditStore::PublishCheckpoint(std::string_view payload) {
  if (absl::Status s = Connect(); !s.ok()) return s;
  const std::string text(payload);
  const char* params[] = {instance_.c_str(), text.c_str()};
  Result r(
      Pq().exec_params(conn_,
                       "INSERT INTO pillar_audit_checkpoints (instance, payload) VALUES ($1, $2) "
                       "ON CONFLICT (instance) DO UPDATE SET payload = EXCLUDED.payload",
                       2, nullptr, params, nullptr, nullptr, 0));
  if (!r.Ok()) return PgError(conn_, "cannot keep the checkpoint");
  return absl::OkStatus();
}

[[nodiscard]] absl::Status ReadPostgresChain(
    const std::string& conninfo, const std::string& instance,
    const std::function<bool(std::string_view, std::string_view, uint64_t)>& record,
    uint64_t from) {
  absl::StatusOr<PGconn*> conn = ConnectTo(conninfo);
  if (!conn.ok()) return conn.status();
  std::unique_ptr<PGconn, void (*)(PGconn*)> owner(*conn, Pq().finish);
  if (absl::Status s = Exec(*conn, "BEGIN ISOLATION LEVEL REPEATABLE READ", "cannot begin");
      !s.ok()) {
    return s;
  }
  const std::string from_text = std::to_string(from);
  const char* params[] = {instance.c_str(), from_text.c_str()};
  Result declare(Pq().exec_params(*conn,
                                  "DECLARE chain NO SCROLL CURSOR FOR SELECT payload, chain FROM "
                                  "pillar_audit WHERE instance = $1 AND seq >= $2 ORDER BY seq",
                                  2, nullptr, params, nullptr, nullptr, 0));
  if (!declare.Ok()) return PgError(*conn, "cannot read the chain");
  uint64_t row = from;
  for (;;) {
    Result batch(Pq().exec(*conn, "FETCH 10000 FROM chain"));
    if (!batch.Ok()) return PgError(*conn, "cannot read the chain");
    const int n = Pq().ntuples(batch.r);
    if (n == 0) break;
    for (int i = 0; i < n; ++i, ++row) {
      if (!record(std::string_view(Pq().getvalue(batch.r, i, 0), Pq().getlength(batch.r, i, 0)),
                  std::string_view(Pq().getvalue(batch.r, i, 1), Pq().getlength(batch.r, i, 1)),
                  row)) {
        return absl::OkStatus();
      }
    }
  }
  return absl::OkStatus();
}

[[nodiscard]] absl::StatusOr<std::vector<std::string>> ListPostgresChains(
    const std::string& conninfo) {
  absl::StatusOr<PGconn*> conn = ConnectTo(conninfo);
  if (!conn.ok()) return conn.status();
  std::unique_ptr<PGconn, void (*)(PGconn*)> owner(*conn, Pq().finish);
  Result r(Pq().exec(*conn, "SELECT DISTINCT instance FROM pillar_audit ORDER BY instance"));
  if (!r.Ok()) return PgError(*conn, "cannot list the chains");
  std::vector<std::string> instances;
  for (int i = 0; i < Pq().ntuples(r.r); ++i) instances.emplace_back(Pq().getvalue(r.r, i, 0));
  return instances;
}

VerifyReport VerifyPostgresChain(const std::string& conninfo, const std::string& instance,
                                 std::vector<signing::PublicKey> keys, VerifyOptions options) {
  absl::StatusOr<std::string> published = absl::NotFoundError("");
  {
    absl::StatusOr<PGconn*> conn = ConnectTo(conninfo);
    if (!conn.ok()) {
      VerifyReport report;
      report.status = conn.status();
      return report;
    }
    published = PublishedCheckpoint(*conn, instance);
    Pq().finish(*conn);
  }
  options.instance = instance;
  AuditVerifier verifier(std::move(keys), std::move(published), "row", std::move(options));
  absl::Status read = ReadPostgresChain(
      conninfo, instance, [&](std::string_view payload, std::string_view chain, uint64_t row) {
        return verifier.Add(payload, chain, row);
      });
  if (!read.ok()) {
    VerifyReport report;
    report.status = read;
    return report;
  }
  return verifier.Finish(0);
}

}  // namespace pillar::audit
