// The HTTP(S) server for metrics and the job page (see http_server.h).
#include "base/http_server.h"

#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "httplib.h"

namespace cpptorchrun::base {
namespace {

bool ConstantTimeSame(absl::string_view a, absl::string_view b) {
  // Length leaks; contents do not.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[b.empty() ? 0 : i % b.size()];
  return diff == 0 && !b.empty();
}

// cpp-httplib's task queue, bounded: `threads` serve, at most `max_queued`
// connections wait; when full, enqueue (the accept loop) waits for room.
class BoundedPool final : public httplib::TaskQueue {
 public:
  BoundedPool(int threads, int max_queued) : max_queued_(max_queued) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    room_.wait(lock, [&] { return stop_ || static_cast<int>(queue_.size()) < max_queued_; });
    if (stop_) {
      lock.unlock();
      fn();  // serves (and closes) the connection on the accept thread
      return;
    }
    queue_.push_back(std::move(fn));
    work_.notify_one();
  }
  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_.notify_all();
    room_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, drained
        fn = std::move(queue_.front());
        queue_.pop_front();
      }
      room_.notify_one();
      fn();
    }
  }
  const int max_queued_;
  std::mutex mu_;
  std::condition_variable work_, room_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

std::string RandomSecret() {
  std::random_device device;
  std::string out;
  for (int i = 0; i < 8; ++i) absl::StrAppend(&out, absl::Hex(device(), absl::kZeroPad8));
  return out;
}

void Apply(const HttpResponse& from, httplib::Response* to) {
  to->status = from.status;
  for (const auto& [name, value] : from.headers) to->set_header(name, value);
  to->set_header("X-Content-Type-Options", "nosniff");
  to->set_header("Cache-Control", "no-store");
  to->set_content(from.body, from.content_type.c_str());
}

std::string LoginForm(absl::string_view next, bool failed) {
  return absl::StrCat(
      "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>cpptorchrun: log in</title></head>"
      "<body><h1>cpptorchrun</h1>",
      failed ? "<p>Wrong token.</p>" : "",
      "<form method=\"post\" action=\"/login\"><label>Rendezvous token "
      "<input type=\"password\" name=\"token\" autofocus></label>"
      "<input type=\"hidden\" name=\"next\" value=\"",
      HtmlEscape(next), "\"> <button>Log in</button></form></body></html>");
}

}  // namespace

bool HttpAuthorized(absl::string_view token, absl::string_view session,
                    absl::string_view authorization, absl::string_view cookie) {
  if (token.empty()) return true;
  if (absl::StartsWith(authorization, "Bearer ") &&
      ConstantTimeSame(authorization.substr(7), token)) {
    return true;
  }
  const std::string value = CookieValue(cookie, kSessionCookie);
  return !value.empty() && ConstantTimeSame(value, session);
}

std::string CookieValue(absl::string_view cookie_header, absl::string_view name) {
  for (absl::string_view part : absl::StrSplit(cookie_header, ';')) {
    part = absl::StripAsciiWhitespace(part);
    if (absl::StartsWith(part, name) && part.size() > name.size() && part[name.size()] == '=') {
      return std::string(part.substr(name.size() + 1));
    }
  }
  return "";
}

std::string SafeRedirect(absl::string_view next) {
  if (next.empty() || next[0] != '/' || absl::StartsWith(next, "//")) return "/";
  for (char c : next) {
    if (c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return "/";
  }
  return std::string(next);
}

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

absl::Status CheckOptions(const HttpServerOptions& options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("HTTP port ", options.port, " is out of range"));
  }
  if (options.threads < 1 || options.max_queued < 1) {
    return absl::InvalidArgumentError("HTTP threads and max_queued must be at least 1");
  }
  return absl::OkStatus();
}

// cpp-httplib's server, HTTPS when the options name a certificate and key.
absl::StatusOr<std::unique_ptr<httplib::Server>> NewHttplibServer(const HttpServerOptions& options, bool tls) {
  if (!tls) return std::make_unique<httplib::Server>();
  for (const std::string& file : {options.tls_cert_file, options.tls_key_file}) {
    if (FILE* f = std::fopen(file.c_str(), "r")) {
      std::fclose(f);
    } else {
      return absl::NotFoundError(absl::StrCat("cannot read TLS file ", file));
    }
  }
  auto ssl = std::make_unique<httplib::SSLServer>(options.tls_cert_file.c_str(), options.tls_key_file.c_str());
  if (!ssl->is_valid()) {
    return absl::InvalidArgumentError(absl::StrCat("TLS certificate ", options.tls_cert_file, " or key ",
                                                   options.tls_key_file, " cannot be used"));
  }
  return std::unique_ptr<httplib::Server>(std::move(ssl));
}

// The limits: threads and queue, request size, timeouts, keep-alive.
void ApplyLimits(const HttpServerOptions& options, httplib::Server& http) {
  const int threads = options.threads, queued = options.max_queued;
  http.new_task_queue = [threads, queued] { return new BoundedPool(threads, queued); };
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, which would
  // let a second process bind the same port and take some of its requests.
  http.set_socket_options([](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  http.set_payload_max_length(options.max_request_bytes);
  auto seconds = [](absl::Duration d) { return std::chrono::microseconds(absl::ToInt64Microseconds(d)); };
  http.set_read_timeout(seconds(options.read_timeout));
  http.set_write_timeout(seconds(options.write_timeout));
  http.set_keep_alive_timeout(absl::ToInt64Seconds(options.keep_alive_timeout));
  http.set_keep_alive_max_count(options.max_requests_per_connection);
}

// The request in our terms: a form's fields join the query's.
HttpRequest ToRequest(const httplib::Request& req) {
  HttpRequest request;
  request.method = req.method;
  request.path = req.path;
  for (const auto& [k, v] : req.params) request.params.emplace(k, v);
  request.body = req.body;
  if (request.method == "POST" &&
      absl::StartsWith(req.get_header_value("Content-Type"), "application/x-www-form-urlencoded")) {
    httplib::Params form;
    httplib::detail::parse_query_text(req.body, form);
    for (const auto& [k, v] : form) request.params.emplace(k, v);
  }
  return request;
}

// The port bound (the kernel's pick for 0); 0 when it cannot be bound.
int Bind(const HttpServerOptions& options, httplib::Server& http) {
  if (options.port == 0) return std::max(http.bind_to_any_port(options.host), 0);
  return http.bind_to_port(options.host, options.port) ? options.port : 0;
}

}  // namespace

HttpResponse HttpServer::Handle(const HttpRequest& request, const std::string& authorization,
                                const std::string& cookie, const std::string& accept) const {
  if (request.path == "/login") return Login(request);
  if (HttpAuthorized(options_.token, session_, authorization, cookie)) return Dispatch(request);
  HttpResponse denied;
  denied.status = 401;
  denied.headers.emplace_back("WWW-Authenticate", "Bearer");
  if (absl::StrContains(accept, "text/html")) {
    // A browser: the login form, which comes back here once logged in.
    denied.content_type = "text/html; charset=utf-8";
    denied.body = LoginForm(SafeRedirect(request.path), false);
  } else {
    denied.body = "unauthorized: send \"Authorization: Bearer <token>\", or log in at /login\n";
  }
  return denied;
}

void HttpServer::Route(httplib::Server& http) {
  auto handle = [this](const httplib::Request& req, httplib::Response& res) {
    Apply(Handle(ToRequest(req), req.get_header_value("Authorization"), req.get_header_value("Cookie"),
                 req.get_header_value("Accept")),
          &res);
  };
  // Every path (cpp-httplib's patterns are regular expressions, and ".*"
  // would not match a path holding a newline).
  const std::string any = R"([\s\S]*)";
  http.Get(any, handle);
  http.Post(any, handle);
  auto refuse = [](const httplib::Request&, httplib::Response& res) {
    HttpResponse r;
    r.status = 405;
    r.body = "method not allowed\n";
    Apply(r, &res);
  };
  http.Put(any, refuse);
  http.Delete(any, refuse);
  http.Patch(any, refuse);
  http.Options(any, refuse);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const HttpServerOptions& options, std::vector<std::pair<std::string, HttpHandler>> routes) {
  if (absl::Status ok = CheckOptions(options); !ok.ok()) return ok;
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->options_ = options;
  server->session_ = RandomSecret();
  server->routes_ = std::move(routes);
  server->tls_ = !options.tls_cert_file.empty() && !options.tls_key_file.empty();
  absl::StatusOr<std::unique_ptr<httplib::Server>> http = NewHttplibServer(options, server->tls_);
  if (!http.ok()) return http.status();
  server->server_ = *std::move(http);
  ApplyLimits(options, *server->server_);
  server->Route(*server->server_);
  server->port_ = Bind(options, *server->server_);
  if (server->port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for HTTP on ", options.host, ":", options.port));
  }
  HttpServer* self = server.get();
  server->listener_ = std::thread([self] { self->server_->listen_after_bind(); });
  // cpp-httplib's stop() does nothing until its loop runs: wait for it
  // (bounded), so that a Shutdown right after Start cannot be lost.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!self->server_->is_running() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  return server;
}

HttpServer::~HttpServer() { Shutdown(); }

void HttpServer::Shutdown() {
  if (server_) server_->stop();
  if (listener_.joinable()) listener_.join();
}

std::string HttpServer::url() const {
  const bool v6 = options_.host.find(':') != std::string::npos;
  return absl::StrCat(tls_ ? "https" : "http", "://", v6 ? "[" : "", options_.host, v6 ? "]" : "",
                      ":", port_);
}

HttpResponse HttpServer::Dispatch(const HttpRequest& request) const {
  const HttpHandler* best = nullptr;
  size_t best_length = 0;
  for (const auto& [route, handler] : routes_) {
    const bool prefix = !route.empty() && route.back() == '*';
    const absl::string_view stem = prefix ? absl::string_view(route).substr(0, route.size() - 1) : route;
    const bool match = prefix ? absl::StartsWith(request.path, stem) : route == request.path;
    if (match && route.size() >= best_length) {
      best = &handler;
      best_length = route.size();
    }
  }
  if (best == nullptr) {
    HttpResponse missing;
    missing.status = 404;
    missing.body = "not found\n";
    return missing;
  }
  return (*best)(request);
}

HttpResponse HttpServer::Login(const HttpRequest& request) const {
  HttpResponse response;
  response.content_type = "text/html; charset=utf-8";
  auto next_it = request.params.find("next");
  const std::string next = SafeRedirect(next_it == request.params.end() ? "" : next_it->second);
  auto token_it = request.params.find("token");
  if (token_it == request.params.end()) {
    response.body = LoginForm(next, false);
    return response;
  }
  if (options_.token.empty() || ConstantTimeSame(token_it->second, options_.token)) {
    response.status = 303;
    response.headers.emplace_back("Location", next);
    response.headers.emplace_back(
        "Set-Cookie", absl::StrCat(kSessionCookie, "=", session_,
                                   "; Path=/; HttpOnly; SameSite=Strict", tls_ ? "; Secure" : ""));
    response.body = "logged in\n";
    response.content_type = "text/plain; charset=utf-8";
    return response;
  }
  response.status = 401;
  response.body = LoginForm(next, true);
  return response;
}

}  // namespace cpptorchrun::base
