// Header rewriting for both hops, without sockets.
#include "proxy/headers.hpp"

#include <doctest/doctest.h>
#include <boost/beast/http/error.hpp>

using namespace sluice;
namespace bhttp = boost::beast::http;

namespace {

http::message_head parse_head(const std::string& raw, bool request = true) {
    http::message_head head;
    std::string out;
    http::body_sink sink{&out, http::body_sink::framing::none, 0};
    boost::system::error_code ec;
    if (request) {
        http::request_parser p(head, sink);
        p.put(boost::asio::buffer(raw), ec);
    } else {
        http::response_parser p(head, sink);
        p.put(boost::asio::buffer(raw), ec);
    }
    REQUIRE_FALSE(ec);
    return head;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("hop-by-hop fields are dropped before the forwarding fields are added") {
    auto req = parse_head(
        "GET /x HTTP/1.1\r\nHost: api.example\r\nConnection: keep-alive, X-Secret, X-Forwarded-For, Via\r\n"
        "X-Secret: s\r\nKeep-Alive: 5\r\nTE: trailers\r\nTrailer: x\r\nProxy-Authorization: p\r\n"
        "Proxy-Foo: f\r\nX-Forwarded-For: 1.2.3.4\r\nVia: 1.1 lb\r\nX-Forwarded-Proto: https\r\n"
        "X-Kept: yes\r\n\r\n");
    std::string out;
    proxy::write_request_head(out, req, {"10.0.0.7", "up:3000", "", false}, proxy::body_framing::none, 0);
    CHECK(out.rfind("GET /x HTTP/1.1\r\n", 0) == 0);
    CHECK(contains(out, "Host: api.example\r\n"));
    CHECK(contains(out, "X-Kept: yes\r\n"));
    for (const char* gone :
         {"Connection", "X-Secret", "Keep-Alive", "TE:", "Trailer", "Proxy-", "https", "1.2.3.4", "1.1 lb"})
        CHECK_MESSAGE(!contains(out, gone), gone);
    // Naming them in Connection removed the client's copies, never Sluice's own.
    CHECK(contains(out, "X-Forwarded-For: 10.0.0.7\r\n"));
    CHECK(contains(out, "X-Forwarded-Proto: http\r\n"));
    CHECK(contains(out, "X-Forwarded-Host: api.example\r\n"));
    CHECK(contains(out, "Via: 1.1 sluice\r\n"));
    CHECK(out.size() >= 4);
    CHECK(out.substr(out.size() - 4) == "\r\n\r\n");
}

TEST_CASE("forwarding fields extend what the client sent") {
    auto req = parse_head("GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 1.1.1.1, 2.2.2.2\r\nVia: 1.0 edge\r\n\r\n");
    std::string out;
    proxy::write_request_head(out, req, {"3.3.3.3", "up", "", false}, proxy::body_framing::none, 0);
    CHECK(contains(out, "X-Forwarded-For: 1.1.1.1, 2.2.2.2, 3.3.3.3\r\n"));
    CHECK(contains(out, "Via: 1.0 edge, 1.1 sluice\r\n"));
}

TEST_CASE("several X-Forwarded-For and Via fields are joined in order, then extended") {
    // HAProxy's `option forwardfor` adds a field of its own after the client's.
    auto req = parse_head(
        "GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-For: 6.6.6.6\r\nVia: 1.0 a\r\nX-Forwarded-For: 1.2.3.4\r\n"
        "Via: 1.1 b\r\n\r\n");
    std::string out;
    proxy::write_request_head(out, req, {"127.0.0.1", "up", "", false}, proxy::body_framing::none, 0);
    CHECK(contains(out, "X-Forwarded-For: 6.6.6.6, 1.2.3.4, 127.0.0.1\r\n"));
    CHECK(contains(out, "Via: 1.0 a, 1.1 b, 1.1 sluice\r\n"));
}

TEST_CASE("X-Forwarded-Proto and -Host stand when a trusted proxy sent them, and only then") {
    auto req = parse_head(
        "GET / HTTP/1.1\r\nHost: inner\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: api.example\r\n\r\n");
    std::string out;
    proxy::write_request_head(out, req, {"10.0.0.1", "up", "", false, {}, {}, true}, proxy::body_framing::none, 0);
    CHECK(contains(out, "X-Forwarded-Proto: https\r\n"));
    CHECK(contains(out, "X-Forwarded-Host: api.example\r\n"));
    out.clear();
    proxy::write_request_head(out, req, {"10.0.0.1", "up", "", false, {}, {}, false}, proxy::body_framing::none, 0);
    CHECK(contains(out, "X-Forwarded-Proto: http\r\n"));
    CHECK(contains(out, "X-Forwarded-Host: inner\r\n"));
    CHECK_FALSE(contains(out, "https"));
    // A value that is no scheme is replaced even from a trusted proxy.
    auto odd = parse_head("GET / HTTP/1.1\r\nHost: h\r\nX-Forwarded-Proto: javascript\r\n\r\n");
    out.clear();
    proxy::write_request_head(out, odd, {"10.0.0.1", "up", "", false, {}, {}, true}, proxy::body_framing::none, 0);
    CHECK(contains(out, "X-Forwarded-Proto: http\r\n"));
}

TEST_CASE("the normalised target is sent, and an absolute-form authority replaces Host") {
    auto req = parse_head("GET http://api.example/a/../login?q=1 HTTP/1.1\r\nHost: other\r\n\r\n");
    std::string out;
    proxy::write_request_head(out, req, {"1.1.1.1", "up", "", false, "/login?q=1", "api.example"},
                              proxy::body_framing::none, 0);
    CHECK(out.rfind("GET /login?q=1 HTTP/1.1\r\n", 0) == 0);
    CHECK(contains(out, "Host: api.example\r\n"));
    CHECK_FALSE(contains(out, "other"));
}

TEST_CASE("framing is rebuilt, never copied") {
    auto req = parse_head("POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
    std::string out;
    proxy::write_request_head(out, req, {"1.1.1.1", "up", "/base", false}, proxy::body_framing::chunked, 0);
    CHECK(out.rfind("POST /base/p HTTP/1.1\r\n", 0) == 0);
    CHECK_FALSE(contains(out, "Content-Length"));
    CHECK_FALSE(contains(out, "Expect"));
    CHECK(contains(out, "Transfer-Encoding: chunked\r\n"));
    out.clear();
    proxy::write_request_head(out, req, {"1.1.1.1", "up", "", false}, proxy::body_framing::length, 3);
    CHECK(contains(out, "Content-Length: 3\r\n"));
}

TEST_CASE("an HTTP/1.0 request without Host gets the upstream's authority") {
    auto req = parse_head("GET / HTTP/1.0\r\n\r\n");
    std::string out;
    proxy::write_request_head(out, req, {"1.1.1.1", "127.0.0.1:3000", "", false}, proxy::body_framing::none, 0);
    CHECK(contains(out, "Host: 127.0.0.1:3000\r\n"));
    CHECK(contains(out, "Via: 1.0 sluice\r\n"));
    CHECK_FALSE(contains(out, "X-Forwarded-Host"));
}

TEST_CASE("upgrade requests keep Upgrade and Connection: upgrade") {
    auto req = parse_head("GET /ws HTTP/1.1\r\nHost: h\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    CHECK(proxy::connection_tokens(req).has("upgrade"));
    std::string out;
    proxy::write_request_head(out, req, {"1.1.1.1", "up", "", true}, proxy::body_framing::none, 0);
    CHECK(contains(out, "Upgrade: websocket\r\n"));
    CHECK(contains(out, "Connection: upgrade\r\n"));
}

TEST_CASE("response heads drop hop-by-hop fields and say how the connection goes on") {
    auto resp = parse_head(
        "HTTP/1.1 200 OK\r\nConnection: X-Secret, keep-alive\r\nX-Secret: 1\r\nKeep-Alive: timeout=5\r\n"
        "Proxy-Authenticate: Basic\r\nTransfer-Encoding: chunked\r\nX-Kept: yes\r\n\r\n",
        false);
    std::string out;
    proxy::write_response_head(out, resp, {.keep_alive = true}, proxy::body_framing::length, 12);
    CHECK(out.rfind("HTTP/1.1 200 OK\r\n", 0) == 0);
    CHECK(contains(out, "X-Kept: yes\r\n"));
    CHECK(contains(out, "Content-Length: 12\r\n"));
    for (const char* gone : {"X-Secret", "Keep-Alive", "Proxy-", "Transfer-Encoding", "Connection"})
        CHECK_MESSAGE(!contains(out, gone), gone);

    out.clear();
    proxy::write_response_head(out, resp, {.keep_alive = false}, proxy::body_framing::chunked, 0);
    CHECK(contains(out, "Connection: close\r\n"));
    CHECK(contains(out, "Transfer-Encoding: chunked\r\n"));

    out.clear();
    proxy::write_response_head(out, resp, {.keep_alive = true, .client_http10 = true}, proxy::body_framing::length, 1);
    CHECK(contains(out, "Connection: keep-alive\r\n"));
}

TEST_CASE("a response head drops the route's cost field, whatever its case") {
    auto resp = parse_head("HTTP/1.1 200 OK\r\nx-request-COST: 7\r\nX-Request-Costly: no\r\n\r\n", false);
    std::string out;
    proxy::write_response_head(out, resp, {.drop = "X-Request-Cost"}, proxy::body_framing::length, 0);
    CHECK_FALSE(contains(out, "x-request-COST"));
    CHECK(contains(out, "X-Request-Costly: no\r\n"));
}

TEST_CASE("a HEAD response keeps the upstream's Content-Length") {
    auto resp = parse_head("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n", false);
    std::string out;
    proxy::write_response_head(out, resp, {.head_request = true}, proxy::body_framing::none, 0);
    CHECK(contains(out, "Content-Length: 100\r\n"));
}

TEST_CASE("idempotent methods") {
    CHECK(proxy::is_idempotent(bhttp::verb::get));
    CHECK(proxy::is_idempotent(bhttp::verb::put));
    CHECK_FALSE(proxy::is_idempotent(bhttp::verb::post));
    CHECK_FALSE(proxy::is_idempotent(bhttp::verb::patch));
}
