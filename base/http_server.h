// A small HTTP(S) server for what operators read (Prometheus metrics, the
// job page): cpp-httplib (Debian's libcpp-httplib-dev) behind an interface
// of plain structs, bound to one address, with the rendezvous token
// checked before any handler runs and every resource bounded:
//   - requests served at once (`threads`), connections accepted and waiting
//     (`max_queued`; beyond it the accept loop waits and the kernel's
//     backlog holds the rest), so a flood cannot grow threads or memory;
//   - a request's body (`max_request_bytes`; larger: 413) and its line and
//     headers (cpp-httplib's 8 KiB each; longer: 414/400);
//   - read, write and keep-alive timeouts, and requests per connection.
// Only GET and POST reach handlers. Nothing here knows the rendezvous.
//
// The token (when set) is accepted two ways: "Authorization: Bearer
// <token>" on each request (Prometheus's `authorization` scrape setting),
// or a session cookie a browser gets once from /login (a form POSTing the
// token; also GET /login?token=...). The cookie holds a random session
// secret made at start, never the token; it is HttpOnly, SameSite=Strict,
// and Secure under TLS. Comparisons take constant time.
#ifndef CPPTORCHRUN_BASE_HTTP_SERVER_H_
#define CPPTORCHRUN_BASE_HTTP_SERVER_H_

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace httplib {
class Server;
}

namespace cpptorchrun::base {

struct HttpRequest {
  std::string method;  // GET or POST
  std::string path;    // without the query
  std::map<std::string, std::string> params;  // query (and form) parameters
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// Called on the server's threads, concurrently: must be thread-safe.
using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // IPv6 without brackets
  int port = 0;                    // 0: one the kernel picks
  std::string token;               // empty: no check
  std::string tls_cert_file, tls_key_file;  // both: HTTPS
  // cpp-httplib serves a connection on one thread until it closes: an idle
  // keep-alive connection holds its thread for keep_alive_timeout.
  int threads = 8;
  int max_queued = 32;
  size_t max_request_bytes = 16 * 1024;
  absl::Duration read_timeout = absl::Seconds(5);
  absl::Duration write_timeout = absl::Seconds(5);
  absl::Duration keep_alive_timeout = absl::Seconds(1);
  int max_requests_per_connection = 100;
};

// The session cookie's name.
inline constexpr absl::string_view kSessionCookie = "cpptorchrun_session";

// Whether a request carrying these headers (empty: absent) may pass, for a
// server with `token` (empty: every request) and session secret `session`.
bool HttpAuthorized(absl::string_view token, absl::string_view session,
                    absl::string_view authorization, absl::string_view cookie);
// The value of cookie `name` in a Cookie header; empty when absent.
std::string CookieValue(absl::string_view cookie_header, absl::string_view name);
// Where /login may send a browser: `next` when it is a path on this server
// ("/..." but not "//..." nor with a backslash or a control character), else "/".
std::string SafeRedirect(absl::string_view next);
// Text for HTML bodies: & < > " ' as entities.
std::string HtmlEscape(absl::string_view text);

class HttpServer {
 public:
  // Routes: a path, or a prefix written with a trailing '*' ("/run/*";
  // the longest match wins).
  // Unknown paths: 404; other methods: 405. Errors: InvalidArgument
  // (a bad option), NotFound (TLS files), Unavailable (cannot bind).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const HttpServerOptions& options, std::vector<std::pair<std::string, HttpHandler>> routes);
  ~HttpServer();  // Shutdown()

  int port() const { return port_; }
  bool tls() const { return tls_; }
  // "http[s]://host:port".
  std::string url() const;
  // Stops listening and waits for the requests being served. Idempotent.
  void Shutdown();

 private:
  HttpServer() = default;
  HttpResponse Dispatch(const HttpRequest& request) const;
  HttpResponse Login(const HttpRequest& request) const;
  // One request: /login, else the token or the session cookie, else a 401
  // (the login form for a browser).
  HttpResponse Handle(const HttpRequest& request, const std::string& authorization, const std::string& cookie,
                      const std::string& accept) const;
  // Every path and method to Handle (GET, POST) or a 405.
  void Route(httplib::Server& http);

  HttpServerOptions options_;
  std::string session_;
  std::vector<std::pair<std::string, HttpHandler>> routes_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  int port_ = 0;
  bool tls_ = false;
};

}  // namespace cpptorchrun::base

#endif  // CPPTORCHRUN_BASE_HTTP_SERVER_H_
