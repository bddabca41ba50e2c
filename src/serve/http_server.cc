#include "serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include "core/error.h"
#include "serve/service.h"

namespace glint {

struct HttpServer::Impl {
  Service& service;
  httplib::Server server;
  explicit Impl(Service& s) : service(s) {}
};

HttpServer::HttpServer(Service& service, int64_t max_body, int threads) : impl_(std::make_unique<Impl>(service)) {
  httplib::Server& s = impl_->server;
  s.set_payload_max_length(size_t(max_body));
  // Responses go out as headers, then body: with Nagle's algorithm on, the body would wait
  // for the client's delayed ACK (~40 ms a request on a kept-alive connection).
  s.set_tcp_nodelay(true);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  // SO_REUSEADDR only: a restart binds at once over connections in TIME_WAIT, but a
  // second server on a port in use is refused (cpp-httplib's default also sets
  // SO_REUSEPORT, with which the kernel would split the connections between the two).
  s.set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  s.set_read_timeout(60, 0);
  s.set_write_timeout(60, 0);
  auto handler = [this](const httplib::Request& in, httplib::Response& out) {
    HttpRequest req;
    req.method = in.method;
    req.path = in.path;
    for (const auto& [k, v] : in.params) req.query[k] = v;
    req.api_key = in.get_header_value("X-API-Key");
    req.idempotency_key = in.get_header_value("X-Idempotency-Key");
    req.body = in.body;
    req.content_type = in.get_header_value("Content-Type");
    req.content_encoding = in.get_header_value("Content-Encoding");
    req.accept = in.get_header_value("Accept");
    HttpResponse r = impl_->service.handle(req);
    out.status = r.status;
    for (const auto& [k, v] : r.headers) out.set_header(k, v);
    out.set_content(r.body, r.content_type);
  };
  s.Get(".*", handler);
  s.Post(".*", handler);
  s.Delete(".*", handler);
  s.Put(".*", handler);
  s.set_error_handler([](const httplib::Request&, httplib::Response& out) {
    if (out.body.empty()) {
      const std::string msg = out.status == 413 ? "request body too large" : "bad request";
      out.set_content("{\"error\":\"" + msg + "\",\"category\":\"user\"}", "application/json");
    }
  });
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind(const std::string& host, int port) {
  httplib::Server& s = impl_->server;
  if (port == 0) {
    int p = s.bind_to_any_port(host);
    GLINT_CHECK(p > 0, "cannot bind ", host, " on any port");
    return p;
  }
  GLINT_CHECK(s.bind_to_port(host, port), "cannot listen on ", host, ":", port,
              ": the port is in use (another server?) or not allowed; choose another with --port");
  return port;
}

void HttpServer::serve() { impl_->server.listen_after_bind(); }

void HttpServer::stop() { impl_->server.stop(); }

}  // namespace glint
