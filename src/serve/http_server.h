// The HTTP front of the service (cpp-httplib): every request becomes an HttpRequest for
// Service::handle, on a pool of threads (retrieve_future long-polls hold one each).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace glint {

class Service;

class HttpServer {
 public:
  // max_body: larger request bodies are answered 413 without being read.
  HttpServer(Service& service, int64_t max_body, int threads);
  ~HttpServer();
  // Binds host:port (port 0: any free port); returns the port. Throws glint::Error.
  int bind(const std::string& host, int port);
  void serve();  // blocks until stop()
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace glint
