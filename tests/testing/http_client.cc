#include "testing/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

namespace pillar::testing {

HttpConnection::HttpConnection(uint16_t port, int timeout_ms, int receive_buffer_bytes) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (receive_buffer_bytes > 0) {
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof receive_buffer_bytes);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

HttpConnection::~HttpConnection() { Close(); }

void HttpConnection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool HttpConnection::SendRaw(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += size_t(n);
  }
  return true;
}

HttpReply HttpConnection::ReadReply() {
  HttpReply reply;
  char chunk[16384];
  size_t header_end;
  while ((header_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
    ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return reply;
    buffer_.append(chunk, size_t(n));
  }
  std::string head = buffer_.substr(0, header_end);
  buffer_.erase(0, header_end + 4);
  size_t line_end = head.find("\r\n");
  std::string status_line = head.substr(0, line_end);
  if (status_line.size() < 12) return reply;
  int status = std::atoi(status_line.substr(9, 3).c_str());
  size_t pos = line_end == std::string::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t end = head.find("\r\n", pos);
    if (end == std::string::npos) end = head.size();
    std::string line = head.substr(pos, end - pos);
    size_t colon = line.find(':');
    if (colon != std::string::npos) {
      std::string name = line.substr(0, colon);
      for (char& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      reply.headers[name] = value;
    }
    pos = end + 2;
  }
  if (reply.Header("transfer-encoding") == "chunked") {  // a streamed answer, decoded
    auto fill = [&] {
      ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
      if (n > 0) buffer_.append(chunk, size_t(n));
      return n > 0;
    };
    for (;;) {
      size_t line;
      while ((line = buffer_.find("\r\n")) == std::string::npos) {
        if (!fill()) return reply;
      }
      const size_t size = std::strtoul(buffer_.substr(0, line).c_str(), nullptr, 16);
      while (buffer_.size() < line + 2 + size + 2) {
        if (!fill()) return reply;
      }
      reply.body.append(buffer_, line + 2, size);
      buffer_.erase(0, line + 2 + size + 2);
      if (size == 0) break;
    }
    reply.status = status;
    return reply;
  }
  size_t length = std::strtoul(reply.Header("content-length").c_str(), nullptr, 10);
  while (buffer_.size() < length) {
    ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) return reply;
    buffer_.append(chunk, size_t(n));
  }
  reply.body = buffer_.substr(0, length);
  buffer_.erase(0, length);
  reply.status = status;
  return reply;
}

bool HttpConnection::Readable(int timeout_ms) {
  if (!buffer_.empty()) return true;
  pollfd p{fd_, POLLIN, 0};
  return ::poll(&p, 1, timeout_ms) > 0;
}

HttpReply HttpConnection::Request(const std::string& method, const std::string& path,
                                  const std::string& body,
                                  const std::vector<std::string>& headers) {
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  for (const std::string& h : headers) request += h + "\r\n";
  if (!body.empty() || method == "POST")
    request += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  request += "\r\n" + body;
  if (!SendRaw(request)) return {};
  return ReadReply();
}

HttpReply Fetch(uint16_t port, const std::string& method, const std::string& path,
                const std::string& body, const std::vector<std::string>& headers) {
  HttpConnection connection(port);
  if (!connection.connected()) return {};
  return connection.Request(method, path, body, headers);
}

std::string Bearer(const std::string& key) { return "Authorization: Bearer " + key; }

}  // namespace pillar::testing
