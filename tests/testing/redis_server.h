// A real redis-server (Debian's) for tests: its own temp directory, a free loopback port, no
// persistence, started and stopped by the test. Kill() and Start() again on the same port
// simulate an outage and the recovery.
//
//   RedisServer redis;
//   ASSERT_TRUE(redis.Start());
//   ... connect to 127.0.0.1:redis.port() ...
//   redis.Kill();   // outage
//   ASSERT_TRUE(redis.Start());  // back, same port, empty
#pragma once

#include <sys/types.h>

#include <string>

#include "testing/temp_dir.h"

namespace pillar::testing {

class RedisServer {
 public:
  RedisServer();
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // Starts the server (on the port it had, if it ran before) and waits until it answers PING.
  bool Start();
  // SIGKILL: no goodbye to clients, like a crashed or unplugged server.
  void Kill();
  // SIGSTOP and SIGCONT: a server that hangs with its connections open, then comes back.
  void Pause();
  void Resume();
  int port() const { return port_; }
  // Requires AUTH with this password (set before Start()).
  void SetPassword(std::string password) { password_ = std::move(password); }
  // Sends one inline command and returns the raw reply (tests use FLUSHALL, DBSIZE ...).
  std::string Command(const std::string& line) const;

 private:
  TempDir dir_;
  int port_ = 0;
  pid_t pid_ = -1;
  std::string password_;
};

}  // namespace pillar::testing
