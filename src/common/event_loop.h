// The event loop the calling thread runs, when it runs one. A part that does I/O for a request
// (a remote runner's upstream call) does it on the request's own loop, so that no thread
// hand-off sits on the request's path; the HTTP server's loop threads say which loop they run.
//
//   ScopedEventLoop running(context);  // on a loop's thread, around context.run()
//   boost::asio::io_context* loop = ThisThreadEventLoop();  // null on any other thread
//
// Whoever starts I/O on a loop found here must be done with it before the loop is destroyed:
// the server's loops outlive the models (app/serve_command.cc unloads them first).
#pragma once

namespace boost::asio {
class io_context;
}  // namespace boost::asio

namespace pillar {

boost::asio::io_context* ThisThreadEventLoop();

class ScopedEventLoop {
 public:
  explicit ScopedEventLoop(boost::asio::io_context& loop);
  ~ScopedEventLoop();
  ScopedEventLoop(const ScopedEventLoop&) = delete;
  ScopedEventLoop& operator=(const ScopedEventLoop&) = delete;

 private:
  boost::asio::io_context* previous_;
};

}  // namespace pillar
