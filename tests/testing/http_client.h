// A deliberately small blocking HTTP/1.1 client over POSIX sockets for tests: it can send any
// bytes (malformed requests, slow or truncated ones), and it parses only what pillar sends
// back (Content-Length bodies).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pillar::testing {

struct HttpReply {
  int status = 0;                              // 0 when no response arrived
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class HttpConnection {
 public:
  // `receive_buffer_bytes` > 0 sets the socket's receive buffer before it connects (a client
  // that reads slowly).
  explicit HttpConnection(uint16_t port, int timeout_ms = 10000, int receive_buffer_bytes = 0);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  bool connected() const { return fd_ >= 0; }
  // The socket, for what this class does not do (a half-close, a poll, a raw read).
  int fd() const { return fd_; }
  // Closes the connection now rather than at destruction.
  void Close();
  bool SendRaw(const std::string& bytes);
  // Reads one response; status 0 when the connection closed or timed out first.
  HttpReply ReadReply();
  // True when a response or EOF is waiting to be read, within `timeout_ms`; consumes nothing.
  bool Readable(int timeout_ms);
  HttpReply Request(const std::string& method, const std::string& path,
                    const std::string& body = "", const std::vector<std::string>& headers = {});

 private:
  int fd_ = -1;
  std::string buffer_;
};

// One request on a fresh connection.
HttpReply Fetch(uint16_t port, const std::string& method, const std::string& path,
                const std::string& body = "", const std::vector<std::string>& headers = {});

std::string Bearer(const std::string& key);

}  // namespace pillar::testing
