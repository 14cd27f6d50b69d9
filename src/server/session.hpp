// A client connection, served one request at a time, each read as its phases in order:
// read the head -> route -> identify -> limit -> exchange with the upstream -> respond.
// session.cpp holds the phases up to the limit decision and the answers Sluice gives
// itself; the identify phase is identity::identify() (identity/identify.hpp), the limit
// phase limit_step (server/limit_step.hpp); exchange.cpp the upstream exchange (request
// body, upstream connection, response relay, tunnel).
//
// Every failure is a value from the table in http/response.hpp, answered by respond().
// The access log line and the request metrics are written once, by end_request(), when
// the request's answer is complete.
//
// Thread: the owning worker's thread only.
#pragma once

#include "http/deadline_sweep.hpp"
#include "http/message.hpp"
#include "http/response.hpp"
#include "identity/caller.hpp"
#include "limit/admission.hpp"
#include "proxy/headers.hpp"
#include "proxy/relay.hpp"
#include "route/target.hpp"
#include "server/limit_step.hpp"
#include "server/upstream_cap.hpp"
#include "server/worker.hpp"
#include "tls/stream.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include <memory>
#include <optional>

namespace sluice::server {

// Serves one accepted connection until it closes. `kind` tls: accepted on the TLS listener
// (the handshake comes first, after a PROXY header); check: on the HTTP check's listener
// (service.http_listen: each request is a check, answered without an upstream; check.cpp).
//
// While requests come, a `session` serves them, in the frame of a coroutine; once none is
// waiting, the session ends and the connection waits for readability in a plain handler
// holding the `connection` alone (no coroutine frame, no buffer): an idle keep-alive
// connection costs its socket, SSL and the few fields below. A new session starts when
// the client speaks again.
boost::asio::awaitable<void> serve(worker& w, boost::asio::ip::tcp::socket socket, listener_kind kind);

// What a client connection keeps between requests.
struct connection {
    connection(worker& w, boost::asio::ip::tcp::socket s, listener_kind kind);
    ~connection();
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;
    // Ends it: close_notify on TLS (the end is not a truncation), then the socket closed.
    void close();

    worker& w;
    tls::stream client;
    identity::address peer;  // the TCP peer, or the source a PROXY header gave
    std::string client_ip;
    http::tracked_connection track;
    std::string certificate;  // the user a verified client certificate names (clients.user.certificate)
    bool tls = false;         // a TLS listener's connection (secure once its handshake is done)
    bool check = false;       // the HTTP check listener's connection
    bool first = true;        // no request served yet
};

// "post" is no method Beast knows, but an upstream that upper-cases methods reads POST:
// a route limited to POST must not be walked around that way.
bool is_verb_in_other_case(std::string_view method);

// What becomes of the client connection once a request is answered.
enum class after { keep_alive, close, linger };

// Everything one request sets, reset as a unit before the next (strings keep capacity).
struct request_state {
    route::request_target target;
    const route::route* route = nullptr;
    std::size_t route_slot = 0;
    identity::caller who;
    std::string refusal;  // why the identify phase refused the credentials (401)
    limit::outcome outcome;
    http::clock::time_point started{};
    std::int64_t upstream_us = -1;              // request sent to response head; -1: not asked
    const upstream::pool* upstream = nullptr;   // the pool of the attempts (kept alive by the snapshot)
    std::string upstream_addr;                  // the server of the last attempt
    unsigned attempts = 0;                      // servers tried
    unsigned status = 0;                        // the answer's status; 0 until one was chosen
    bool open = false;                          // a request began and is not yet logged
    bool early_answer = false;                  // the upstream answered before taking the whole body
    std::optional<std::int64_t> reported_cost;  // the cost the upstream reported (cost_header), up to max_cost
    proxy::body_deadline body_deadline;         // when the request body must have arrived
    std::string body;                           // the request body read ahead (request_buffering)

    void reset(std::size_t unmatched_slot);
};

class session {
public:
    explicit session(connection& c);
    ~session();
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    // A new connection's PROXY header and TLS handshake; false: it is to be closed.
    boost::asio::awaitable<bool> open();
    // Serves requests while they come; true: none is waiting now (the connection is idle),
    // false: the connection is to be closed.
    boost::asio::awaitable<bool> run();

private:
    using failure = http::failure;
    enum class head_status { ok, closed, failed };
    // How a step of the upstream exchange ended: on, failed, or to be tried again on a new
    // connection (a pooled one was found closed before any of the request could matter).
    // `elsewhere`: the failure leaves the request safe to send to another server (it never
    // reached this one, or it is idempotent, whole in memory, and got no byte of answer).
    struct step {
        std::optional<failure> failed;
        bool retry = false;
        bool elsewhere = false;
    };

    // session.cpp: the phases
    boost::asio::awaitable<bool> serve_one();
    bool request_waiting();
    boost::asio::awaitable<after> phases();
    boost::asio::awaitable<head_status> read_head();
    boost::asio::awaitable<bool> handshake();
    std::optional<failure> check_head();
    bool identify();
    // The route's cost_header ("" = none): read for the charge, never relayed.
    std::string_view cost_header() const { return req_.route ? std::string_view(req_.route->cost_header) : ""; }
    // `extra`: header lines ("Name: value\r\n") the answer carries.
    boost::asio::awaitable<after> respond(const failure& f, std::string_view extra = {});
    boost::asio::awaitable<after> respond_limited();
    boost::asio::awaitable<after> respond_blocked();
    boost::asio::awaitable<after> respond_refused();
    // The answer's status is `status`: the request's charge is settled (limit_step::settle)
    // at what its route charges for that outcome.
    boost::asio::awaitable<void> settle(unsigned status);
    boost::asio::awaitable<after> send_own_answer(bool keep);
    boost::asio::awaitable<void> linger();
    void end_request();
    bool may_keep_alive() const;
    // How Sluice's own answer speaks of the connection, kept or not.
    http::connection connection_of(bool keep) const;

    // check.cpp: the HTTP check (service.http_listen)
    boost::asio::awaitable<after> check();
    // The original request the check's fields describe, into orig_ and check_client_.
    std::optional<failure> describe_original();
    boost::asio::awaitable<std::optional<failure>> discard_body();
    boost::asio::awaitable<after> respond_admitted();

    // exchange.cpp: the upstream exchange
    boost::asio::awaitable<after> exchange();
    boost::asio::awaitable<std::optional<failure>> read_body_ahead(proxy::body_framing& framing, std::uint64_t& length);
    // `new_attempt`: false when a pooled connection found closed is replaced.
    boost::asio::awaitable<step> connect_upstream(std::shared_ptr<upstream::slot> to, bool new_attempt);
    boost::asio::awaitable<step> send_request(proxy::body_framing framing, std::uint64_t length, bool replayable,
                                              bool idempotent);
    boost::asio::awaitable<step> read_response_head(bool replayable, bool idempotent);
    // Whether the retry budget lets a failed attempt go to another server (counting it).
    bool may_retry();
    // Passive health: the attempt on the held server failed, or answered.
    void server_failed();
    // A failed attempt counted by kind, gateway-wide and for the server of `slot_` if any.
    void upstream_error(metrics::upstream_error e);
    void server_answered(unsigned status);
    std::uint64_t balance_hash() const;
    void check_client_left();
    boost::asio::awaitable<after> relay_response();
    void release_upstream(bool reuse);

    connection& c_;
    worker& w_;
    std::shared_ptr<const snapshot> snap_;  // the snapshot the current request started with
    const config::config* cfg_;
    tls::stream& client_;
    identity::address& peer_;
    std::string& client_ip_;
    http::tracked_connection& track_;
    proxy::relay relay_{track_};
    limit_step limits_{w_};  // admission, and the concurrency slots of the request being served
    upstream_cap cap_{w_};   // the slot of its pool's max_in_flight the request being served holds
    request_state req_;
    failure head_failure_ = http::fail::bad_request;
    bool upgrade_ = false;
    // Capacity kept across requests:
    boost::beast::flat_buffer in_;
    std::string out_;
    std::string target_text_;
    http::message_head head_, resp_;
    http::message_head orig_;         // a check's original request (empty: none described)
    identity::address check_client_;  // the client a check's proxy names
    http::body_sink req_sink_, resp_sink_;
    std::optional<http::request_parser> parser_;
    std::optional<http::response_parser> resp_parser_;
    std::unique_ptr<proxy::upstream_connection> up_;  // watched by track_ while held
    std::shared_ptr<upstream::lane> lane_;            // the pool of the request being served
    std::shared_ptr<upstream::slot> slot_;            // the server of the attempt under way (counted in flight)
    bool client_left_ = false;                        // check_client_left() saw the client go while the upstream worked
};

}  // namespace sluice::server
