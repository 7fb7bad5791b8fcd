#include "testing/postgres_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

#include "testing/free_port.h"

namespace pillar::testing {
namespace {

namespace fs = std::filesystem;

// The newest installed server's bin directory, e.g. /usr/lib/postgresql/15/bin.
std::string BinDirectory() {
  std::string best;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/usr/lib/postgresql", ec)) {
    if (fs::exists(entry.path() / "bin" / "initdb") && entry.path().string() > best) {
      best = entry.path().string();
    }
  }
  return best.empty() ? "" : best + "/bin";
}

}  // namespace

PostgresServer::~PostgresServer() { Stop(); }

std::string PostgresServer::conninfo() const {
  return "host=127.0.0.1 port=" + std::to_string(port_) +
         " user=pillar dbname=postgres connect_timeout=5";
}

bool PostgresServer::Run(const std::vector<std::string>& argv, bool wait, pid_t* pid) {
  const struct passwd* user = ::geteuid() == 0 ? ::getpwnam("postgres") : nullptr;
  if (::geteuid() == 0 && user == nullptr) {
    error_ = "running as root and there is no postgres user to run the server as";
    return false;
  }
  const std::string log = (dir_.path() / "postgres.log").string();
  const pid_t child = ::fork();
  if (child == 0) {
    if (user != nullptr && (::setgroups(0, nullptr) != 0 || ::setgid(user->pw_gid) != 0 ||
                            ::setuid(user->pw_uid) != 0)) {
      ::_exit(126);
    }
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<const char*> args;
    for (const std::string& a : argv) args.push_back(a.c_str());
    args.push_back(nullptr);
    ::execv(args[0], const_cast<char* const*>(args.data()));
    ::_exit(127);
  }
  if (child < 0) return false;
  if (!wait) {
    *pid = child;
    return true;
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    error_ = argv[0] + " failed; see " + log;
    return false;
  }
  return true;
}

bool PostgresServer::Start() {
  if (pid_ > 0) return true;
  const std::string bin = BinDirectory();
  if (bin.empty()) {
    error_ = "no PostgreSQL server under /usr/lib/postgresql (apt-get install postgresql)";
    return false;
  }
  const fs::path data = dir_.path() / "data";
  if (!initialized_) {
    fs::create_directories(data);
    if (::geteuid() == 0) {
      const struct passwd* user = ::getpwnam("postgres");
      if (user == nullptr) {
        error_ = "running as root and there is no postgres user to run the server as";
        return false;
      }
      if (::chown(dir_.path().c_str(), user->pw_uid, user->pw_gid) != 0 ||
          ::chown(data.c_str(), user->pw_uid, user->pw_gid) != 0) {
        error_ = "cannot give the cluster directory to the postgres user";
        return false;
      }
    }
    if (!Run({bin + "/initdb", "-D", data.string(), "-U", "pillar", "-A", "trust", "-E", "UTF8",
              "--no-sync", "--no-instructions"},
             true, nullptr)) {
      return false;
    }
    initialized_ = true;
  }
  if (port_ == 0) port_ = FreeLoopbackPort();
  if (!Run({bin + "/postgres", "-D", data.string(), "-p", std::to_string(port_), "-k",
            data.string(), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"},
           false, &pid_)) {
    return false;
  }
  for (int i = 0; i < 1000; ++i) {
    if (PQping(conninfo().c_str()) == PQPING_OK) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      error_ = "postgres exited at start; see " + (dir_.path() / "postgres.log").string();
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  error_ = "postgres did not accept connections within 10 s";
  Stop();
  return false;
}

void PostgresServer::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGINT);  // fast shutdown
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

bool PostgresServer::Execute(const std::string& sql) const {
  PGconn* conn = PQconnectdb(conninfo().c_str());
  bool ok = PQstatus(conn) == CONNECTION_OK;
  if (ok) {
    PGresult* r = PQexec(conn, sql.c_str());
    ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
  }
  PQfinish(conn);
  return ok;
}

}  // namespace pillar::testing
