// libpq, loaded with dlopen the first time pillar talks to PostgreSQL, as NVML and the LibTorch
// module are. Linking it made every command pay for its start-up whether or not it touched a
// database: about 4 ms here (GnuTLS, Kerberos and LDAP initialise as libpq loads), twice the
// whole start-up of a small native command. Only the calls the audit store makes; their types
// come from <libpq-fe.h>, which costs nothing at run time.
//
//   PILLAR_ASSIGN_OR_RETURN(const Libpq* pq, Libpq::Load());
//   PGconn* conn = pq->connectdb("host=db dbname=pillar");
#pragma once

#include <libpq-fe.h>

#include "absl/status/statusor.h"

namespace pillar::audit {

struct Libpq {
  // Loads libpq.so.5 once per process; later calls return the same table or the same error
  // (FailedPrecondition, naming the library and how to install it).
  [[nodiscard]] static absl::StatusOr<const Libpq*> Load();

  decltype(&::PQconnectdb) connectdb;
  decltype(&::PQstatus) status;
  decltype(&::PQerrorMessage) error_message;
  decltype(&::PQfinish) finish;
  decltype(&::PQexec) exec;
  decltype(&::PQexecParams) exec_params;
  decltype(&::PQresultStatus) result_status;
  decltype(&::PQclear) clear;
  decltype(&::PQntuples) ntuples;
  decltype(&::PQgetvalue) getvalue;
  decltype(&::PQgetlength) getlength;
  decltype(&::PQputCopyData) put_copy_data;
  decltype(&::PQputCopyEnd) put_copy_end;
  decltype(&::PQgetResult) get_result;
};

}  // namespace pillar::audit
