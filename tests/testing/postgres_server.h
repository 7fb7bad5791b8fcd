// A real PostgreSQL server (Debian's postgresql package) for tests: a fresh cluster made by
// initdb in its own temp directory, on a free loopback port, stopped and removed by the
// destructor. PostgreSQL refuses to run as root, so when the tests do, the cluster runs as the
// package's `postgres` user.
//
//   PostgresServer pg;
//   ASSERT_TRUE(pg.Start()) << pg.error();
//   ... connect with pg.conninfo() ...
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "testing/temp_dir.h"

namespace pillar::testing {

class PostgresServer {
 public:
  PostgresServer() = default;
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // initdb (first time), start, and wait until it accepts connections.
  bool Start();
  void Stop();
  // A libpq connection string for the `postgres` database as superuser `pillar`.
  std::string conninfo() const;
  // Runs one SQL statement (for tampering in tests); false on error.
  bool Execute(const std::string& sql) const;
  // Why Start() failed.
  const std::string& error() const { return error_; }

 private:
  bool Run(const std::vector<std::string>& argv, bool wait, pid_t* pid);

  TempDir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  bool initialized_ = false;
  std::string error_;
};

}  // namespace pillar::testing
