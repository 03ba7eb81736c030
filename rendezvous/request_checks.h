// The checks of an incoming rendezvous call that need no state: each
// request's fields against the limits, the caller's token, and the caller's
// address as gRPC names it. Pure functions: the service runs them before it
// takes its lock, and the tests call them without a server.
#ifndef CPPTORCHRUN_RENDEZVOUS_REQUEST_CHECKS_H_
#define CPPTORCHRUN_RENDEZVOUS_REQUEST_CHECKS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/rendezvous.pb.h"
#include "rendezvous/limits.h"

namespace cpptorchrun::rdzv {

// The first thing wrong with a request, by the rules of limits.h:
// InvalidArgument (ResourceExhausted for a value over max_value_bytes)
// naming it; OK when nothing is.
absl::Status CheckRequest(const v1::JoinRequest& r, const Limits& l);
absl::Status CheckRequest(const v1::KeepAliveRequest& r, const Limits& l);
absl::Status CheckRequest(const v1::WatchRequest& r, const Limits& l);
absl::Status CheckRequest(const v1::LeaveRequest& r, const Limits& l);
absl::Status CheckRequest(const v1::CloseRequest& r, const Limits& l);
absl::Status CheckRequest(const v1::RunStatusRequest& r, const Limits& l);
absl::Status CheckRequest(const v1::GetRequest& r, const Limits& l);
absl::Status CheckRequest(const v1::AddRequest& r, const Limits& l);
absl::Status CheckRequest(const v1::DeleteRequest& r, const Limits& l);
absl::Status CheckRequest(const v1::CompareSetRequest& r, const Limits& l);
absl::Status CheckRequest(const v1::MultiSetRequest& r, const Limits& l);
absl::Status CheckRequest(const v1::MultiGetRequest& r, const Limits& l);

// Whether `given` equals `expected`, in time that depends only on the
// length of `expected` (for secrets).
bool ConstantTimeEquals(absl::string_view given, absl::string_view expected);

// Whether an "authorization" metadata value carries `token`, as
// "Bearer <token>".
bool BearerTokenMatches(absl::string_view authorization, absl::string_view token);

// The client's address in a gRPC peer string: "ipv4:1.2.3.4:5678" ->
// "1.2.3.4", "ipv6:[::1]:5678" -> "::1"; "" for any other form.
std::string PeerHost(const std::string& peer);

}  // namespace cpptorchrun::rdzv

#endif  // CPPTORCHRUN_RENDEZVOUS_REQUEST_CHECKS_H_
