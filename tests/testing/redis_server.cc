#include "testing/redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <vector>

#include "testing/free_port.h"

namespace pillar::testing {

RedisServer::RedisServer() = default;

RedisServer::~RedisServer() { Kill(); }

std::string RedisServer::Command(const std::string& line) const {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(uint16_t(port_));
  std::string reply;
  timeval tv{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    std::string request = line + "\r\n";
    if (::write(fd, request.data(), request.size()) == ssize_t(request.size())) {
      char buf[4096];
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n > 0) reply.assign(buf, size_t(n));
    }
  }
  ::close(fd);
  return reply;
}

bool RedisServer::Start() {
  if (pid_ > 0) return true;
  if (port_ == 0) port_ = FreeLoopbackPort();
  const std::string port = std::to_string(port_);
  const std::string dir = dir_.path().string();
  pid_ = ::fork();
  if (pid_ == 0) {
    std::vector<const char*> argv = {
        "redis-server", "--port",      port.c_str(), "--bind",     "127.0.0.1",
        "--dir",        dir.c_str(),   "--save",     "",           "--appendonly",
        "no",           "--daemonize", "no",         "--loglevel", "warning"};
    if (!password_.empty()) {
      argv.push_back("--requirepass");
      argv.push_back(password_.c_str());
    }
    argv.push_back(nullptr);
    // Its banner and warnings go to a file in its directory, not into the test's output.
    int log = ::open((dir + "/redis.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (log >= 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
    }
    ::execvp("redis-server", const_cast<char* const*>(argv.data()));
    ::_exit(127);
  }
  for (int i = 0; i < 500; ++i) {
    const std::string pong = Command("PING");
    if (pong.starts_with("+PONG") || pong.starts_with("-NOAUTH")) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {  // died: port taken, or no binary
      pid_ = -1;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  Kill();
  return false;
}

void RedisServer::Pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void RedisServer::Resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

void RedisServer::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

}  // namespace pillar::testing
