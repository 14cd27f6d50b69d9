// Sluice's own answers: every failure a request can meet, as one table of
// {status, code, message}, and the builders of the bytes sent for them and for a 429.
//
// Thread: pure functions and constants; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace sluice::http {

// One answer Sluice gives instead of (or in place of) the upstream's. `code` is the JSON
// "error" value clients can branch on; `message` says what happened, for people.
struct failure {
    unsigned status;
    std::string_view code;
    std::string_view message;
    // The same failure with a message of the moment (which must outlive the answer).
    failure with(std::string_view m) const { return {status, code, m}; }
};

// The table of error answers in docs/operations.md lists these; keep the two in step.
namespace fail {
inline constexpr failure bad_request{400, "bad_request", "malformed request"};
inline constexpr failure bad_framing{400, "bad_request",
                                     "ambiguous message framing: Transfer-Encoding must be exactly \"chunked\" and "
                                     "cannot be combined with Content-Length"};
inline constexpr failure bad_framing_http10{400, "bad_request",
                                            "Transfer-Encoding is not allowed in an HTTP/1.0 request"};
inline constexpr failure bad_length{400, "bad_request", "invalid Content-Length"};
inline constexpr failure bad_coding{400, "bad_request", "invalid Transfer-Encoding"};
inline constexpr failure bad_host{400, "bad_request", "an HTTP/1.1 request needs exactly one Host field"};
inline constexpr failure bad_target{400, "bad_request", "invalid request target"};
inline constexpr failure bad_body{400, "bad_request", "malformed request body"};
inline constexpr failure unauthorized{401, "unauthorized", "invalid credentials"};
inline constexpr failure forbidden{403, "forbidden", "the caller's plan has no limits configured"};
inline constexpr failure missing_identifier{400, "missing_identifier",
                                            "the request lacks a value its route's policy limits by"};
inline constexpr failure ambiguous_identifier{400, "ambiguous_identifier",
                                              "the request gives a value its route's policy limits by twice"};
inline constexpr failure no_route{404, "not_found", "no route matches the request"};
// The HTTP check (service.http_listen).
inline constexpr failure check_peer{403, "forbidden", "this address may not ask the check (service.http_peers)"};
inline constexpr failure check_path{404, "not_found", "the check listener answers GET or POST /check only"};
inline constexpr failure check_method{405, "method_not_allowed", "the check is asked with GET or POST"};
inline constexpr failure check_no_uri{400, "bad_request",
                                      "the check needs the original request's URI: X-Original-URI or X-Forwarded-Uri"};
inline constexpr failure check_no_client{
    400, "bad_request", "the check needs the client's address: X-Forwarded-For or X-Real-IP, a valid IP address"};
inline constexpr failure check_twice{
    400, "bad_request", "a field that describes the original request is given twice, or differently by its two names"};
inline constexpr failure check_bad_method{400, "bad_request", "the original request's method is not a valid method"};
inline constexpr failure connect_refused{405, "method_not_allowed", "CONNECT is not supported"};
inline constexpr failure bad_method{400, "bad_request", "methods are case-sensitive: write it in upper case"};
inline constexpr failure header_timeout{408, "request_timeout",
                                        "the request header did not arrive within server.header_timeout"};
inline constexpr failure body_timeout{408, "request_timeout",
                                      "the request body did not arrive within server.body_timeout"};
inline constexpr failure too_large{413, "payload_too_large", "the request body exceeds server.max_body_bytes"};
inline constexpr failure bad_expect{417, "expectation_failed", "only Expect: 100-continue is supported"};
inline constexpr failure header_too_large{431, "header_too_large",
                                          "the request header exceeds server.max_header_bytes"};
inline constexpr failure upstream_refused{502, "bad_gateway", "the upstream refused or failed the connection"};
inline constexpr failure upstream_connect_timeout{502, "bad_gateway", "connecting to the upstream timed out"};
inline constexpr failure upstream_tls{502, "bad_gateway", "the upstream's TLS handshake failed"};
inline constexpr failure upstream_send{502, "bad_gateway", "sending the request to the upstream failed"};
inline constexpr failure upstream_closed{502, "bad_gateway", "the upstream closed the connection without a response"};
inline constexpr failure upstream_invalid{502, "bad_gateway", "the upstream sent an invalid response"};
inline constexpr failure upstream_cut{502, "bad_gateway", "the upstream failed while sending its response"};
inline constexpr failure upstream_unasked_101{502, "bad_gateway", "the upstream switched protocols unasked"};
inline constexpr failure no_upstream{502, "bad_gateway", "no upstream server is available"};
inline constexpr failure upstream_busy{503, "upstream_busy", "the upstream pool has max_in_flight requests in flight"};
inline constexpr failure store_down{503, "store_unavailable",
                                    "the rate-limit store cannot be reached and store.on_error is deny"};
inline constexpr failure upstream_timeout{504, "upstream_timeout",
                                          "the upstream did not answer within upstream.timeout"};
inline constexpr failure upstream_send_timeout{504, "upstream_timeout",
                                               "the upstream stopped reading the request within upstream.timeout"};
// Logged only, never sent: the client left before its request was read whole (nginx's 499).
inline constexpr failure client_gone{499, "client_closed", "the client closed the connection"};
}  // namespace fail

// What the answer tells the client of its connection: nothing (HTTP/1.1 keeps it), that it
// stays open (an HTTP/1.0 client waits for a close unless told), or that it closes.
enum class connection { keep_alive, keep_alive_http10, close };

// Appends a whole response: the status line, Date, `extra` field lines ("Name: value\r\n"),
// and the JSON body {"error":"<code>","message":"<message>"}.
void write_failure(std::string& out, const failure& f, connection c, std::string_view extra = {});

// Appends a whole 200 of the HTTP check (an admitted request): the rate-limit `fields`, no
// body.
void write_admitted(std::string& out, std::string_view fields, connection c);

// Appends a whole 429: Retry-After, the rate-limit `fields`, and the JSON body
// {"error":"rate_limited","policy":"<policy>","retry_after":N}. With retry_after_s 0 (a
// concurrency tier refused: no time can be promised), no Retry-After and the body
// {"error":"rate_limited","policy":"<policy>","reason":"too many requests in flight"}.
void write_limited(std::string& out, std::string_view policy, std::int64_t retry_after_s, std::string_view fields,
                   connection c);

// Appends a whole 429 for a caller the operator blocked (the admin API): Retry-After (the
// block's remaining seconds) and the JSON body {"error":"blocked","policy":"<policy>",
// "retry_after":N,"message":"..."}.
void write_blocked(std::string& out, std::string_view policy, std::int64_t retry_after_s, connection c);

// Now as an IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT", RFC 9110 section 5.6.7), formatted
// at most once a second per thread; valid until the calling thread's next call.
std::string_view date_now();
// Appends "Date: <date_now()>\r\n": every answer of a server with a clock has one (RFC 9110
// section 6.6.1).
void append_date(std::string& out);

// Appends the decimal digits of n.
void append_number(std::string& out, std::uint64_t n);

}  // namespace sluice::http
