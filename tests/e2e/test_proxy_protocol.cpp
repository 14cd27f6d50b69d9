// server.proxy_protocol through the real binary: behind a real HAProxy (send-proxy and
// send-proxy-v2), and with raw headers of every kind, split, malformed, late or untrusted.
#include "e2e.hpp"

using namespace sluice::test;
using namespace std::string_literals;

namespace {

// Every client of 127.0.0.0/8 limited to 2 requests a minute on /limited (an exact log: requests
// that straddle a minute of the clock must not start afresh); /echo is free.
const std::string limits_yaml = R"(
policies:
  p:
    ip: [ {limit: 2, per: 1m, algorithm: log} ]
routes:
  - { match: { path_prefix: /limited }, policy: p }
  - { match: { path_prefix: / }, policy: none }
)";

std::unique_ptr<gateway> start_pp_gateway(std::uint16_t upstream_port, const std::string& timeout = "10s") {
    return start_gateway(gateway_yaml(
        upstream_port,
        {{"server.threads", "1"},
         {"server.proxy_protocol", "{ trusted: [\"127.0.0.1\", \"::1\"], header_timeout: " + timeout + " }"}},
        limits_yaml));
}

response get_from(const std::string& source, std::uint16_t port, const std::string& target) {
    connection c("127.0.0.1", port, 10s, source);
    c.send(make_request("GET", target));
    return c.read_response();
}

std::string v2_header(unsigned char ver_cmd, unsigned char fam, const std::string& body) {
    std::string h("\r\n\r\n\0\r\nQUIT\n", 12);
    h += static_cast<char>(ver_cmd);
    h += static_cast<char>(fam);
    h += static_cast<char>(body.size() >> 8);
    h += static_cast<char>(body.size() & 0xff);
    return h + body;
}

// [2001:db8::7]:8080 -> [2001:db8::1]:443
const std::string inet6_body =
    "\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x07"
    "\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"
    "\x1f\x90\x01\xbb"s;
// 203.0.113.9:1234 -> 192.0.2.1:443, then an ALPN and a NOOP TLV
const std::string inet_tlv_body = "\xcb\x00\x71\x09\xc0\x00\x02\x01\x04\xd2\x01\xbb\x01\x00\x02h2\x04\x00\x01z"s;

// The client address the upstream saw for one request sent after `header` on a new
// connection from 127.0.0.1, or "(status N)".
std::string client_seen(std::uint16_t port, const std::string& header, const std::string& target = "/echo") {
    connection c("127.0.0.1", port);
    c.send(header + make_request("GET", target));
    auto r = c.read_response();
    if (r.status != 200) return "(status " + std::to_string(r.status) + ")";
    return echoed(json_of(r), "X-Forwarded-For");
}

double refused(std::uint16_t admin_port, const std::string& reason) {
    return metric_value(fetch(admin_port, "GET", "/metrics").body,
                        "sluice_proxy_protocol_refused_total{reason=\"" + reason + "\"}");
}

void check_haproxy(const std::string& send_proxy) {
    auto up = start_upstream();
    auto gw = start_pp_gateway(up->port);
    haproxy lb(gw->port, send_proxy);
    INFO("gateway output:\n", gw->proc->output(), "\nhaproxy output:\n", lb.proc->output());

    auto r = get_from("127.0.0.2", lb.port, "/echo");
    REQUIRE(r.status == 200);
    CHECK(echoed(json_of(r), "X-Forwarded-For") == "127.0.0.2");
    // Two clients behind one balancer: a budget each.
    for (int i = 0; i < 2; ++i) CHECK(get_from("127.0.0.2", lb.port, "/limited").status == 200);
    CHECK(get_from("127.0.0.2", lb.port, "/limited").status == 429);
    for (int i = 0; i < 2; ++i) CHECK(get_from("127.0.0.3", lb.port, "/limited").status == 200);
    CHECK(get_from("127.0.0.3", lb.port, "/limited").status == 429);
    r = get_from("127.0.0.3", lb.port, "/echo");
    CHECK(echoed(json_of(r), "X-Forwarded-For") == "127.0.0.3");
    for (const char* reason : {"untrusted", "malformed", "timeout", "closed"}) {
        CAPTURE(reason);
        CHECK(refused(gw->admin_port, reason) == 0);
    }
}

}  // namespace

TEST_CASE("proxy protocol: behind HAProxy send-proxy (v1), the client address is the real one") {
    check_haproxy("send-proxy");
}

TEST_CASE("proxy protocol: behind HAProxy send-proxy-v2, the client address is the real one") {
    check_haproxy("send-proxy-v2");
}

TEST_CASE("proxy protocol: v1 and v2 headers sent raw, split, LOCAL and UNKNOWN") {
    auto up = start_upstream();
    auto gw = start_pp_gateway(up->port);
    INFO("gateway output:\n", gw->proc->output());

    SUBCASE("an IPv6 source in v2, and the request follows in the same write") {
        CHECK(client_seen(gw->port, v2_header(0x21, 0x21, inet6_body)) == "2001:db8::7");
    }
    SUBCASE("v1 TCP4 and TCP6, and a kept-alive second request on the same connection") {
        CHECK(client_seen(gw->port, "PROXY TCP6 2001:db8::9 ::1 1 80\r\n") == "2001:db8::9");
        connection c("127.0.0.1", gw->port);
        c.send("PROXY TCP4 198.51.100.7 127.0.0.1 40000 80\r\n" + make_request("GET", "/echo"));
        CHECK(echoed(json_of(c.read_response()), "X-Forwarded-For") == "198.51.100.7");
        c.send(make_request("GET", "/echo"));
        CHECK(echoed(json_of(c.read_response()), "X-Forwarded-For") == "198.51.100.7");
    }
    SUBCASE("LOCAL (v2), UNSPEC, UNIX and UNKNOWN (v1) keep the connection's own peer") {
        CHECK(client_seen(gw->port, v2_header(0x20, 0x00, "")) == "127.0.0.1");
        CHECK(client_seen(gw->port, v2_header(0x20, 0x11, inet_tlv_body)) == "127.0.0.1");
        CHECK(client_seen(gw->port, v2_header(0x21, 0x00, "")) == "127.0.0.1");
        CHECK(client_seen(gw->port, v2_header(0x21, 0x31, std::string(216, 'u'))) == "127.0.0.1");
        CHECK(client_seen(gw->port, "PROXY UNKNOWN\r\n") == "127.0.0.1");
        CHECK(client_seen(gw->port, "PROXY UNKNOWN ::1 ::1 1 2\r\n") == "127.0.0.1");
    }
    SUBCASE("a header split over many small writes, TLVs skipped") {
        for (const std::string& header :
             {v2_header(0x21, 0x11, inet_tlv_body), "PROXY TCP4 203.0.113.9 192.0.2.1 1234 443\r\n"s}) {
            connection c("127.0.0.1", gw->port);
            for (char byte : header) c.send(std::string(1, byte));
            c.send(make_request("GET", "/echo"));
            CHECK(echoed(json_of(c.read_response()), "X-Forwarded-For") == "203.0.113.9");
        }
    }
    // The limit counts the header's source, not the balancer's address.
    SUBCASE("per-ip limits count the header's source") {
        const std::string a = "PROXY TCP4 203.0.113.1 127.0.0.1 1 80\r\n",
                          b = "PROXY TCP4 203.0.113.2 127.0.0.1 1 80\r\n";
        for (int i = 0; i < 2; ++i) CHECK(client_seen(gw->port, a, "/limited") == "203.0.113.1");
        CHECK(client_seen(gw->port, a, "/limited") == "(status 429)");
        CHECK(client_seen(gw->port, b, "/limited") == "203.0.113.2");
    }
    for (const char* reason : {"untrusted", "malformed", "timeout", "closed"}) {
        CAPTURE(reason);
        CHECK(refused(gw->admin_port, reason) == 0);
    }
}

TEST_CASE("proxy protocol: malformed, truncated, late and untrusted connections get no answer") {
    auto up = start_upstream();
    auto gw = start_pp_gateway(up->port, "400ms");
    INFO("gateway output:\n", gw->proc->output());

    SUBCASE("malformed headers, and HTTP without a header") {
        const std::string bad[] = {
            "PROXY TCP4 203.0.113.7 192.0.2.1 51234 99999\r\n",  // port out of range
            "PROXY TCP4 2001:db8::1 192.0.2.1 1 2\r\n",          // family mismatch
            "PROXY TCP4 203.0.113.7 192.0.2.1 01 2\r\n",         // leading zero
            v2_header(0x21, 0x11, "\xcb\x00\x71\x07"s),          // too short for INET
            v2_header(0x31, 0x11, inet6_body),                   // version 3
            "",                                                  // no header at all
        };
        double expected = 0;
        for (const auto& header : bad) {
            CAPTURE(header);
            connection c("127.0.0.1", gw->port);
            c.send(header + make_request("GET", "/echo"));
            auto e = read_to_close(c);
            CHECK(e.closed);
            CHECK(e.bytes.empty());
            CHECK(eventually_metric(gw->admin_port, "sluice_proxy_protocol_refused_total{reason=\"malformed\"}",
                                    ++expected) == expected);
        }
    }
    SUBCASE("a truncated header, then silence past the timeout") {
        for (const std::string& part :
             {"PROXY TCP4 203.0.113.7 19"s, v2_header(0x21, 0x11, inet_tlv_body).substr(0, 20), ""s}) {
            connection c("127.0.0.1", gw->port);
            if (!part.empty()) c.send(part);
            const auto start = std::chrono::steady_clock::now();
            auto e = read_to_close(c);
            CHECK(e.closed);
            CHECK(e.bytes.empty());
            CHECK(std::chrono::steady_clock::now() - start >= 300ms);
        }
        CHECK(eventually_metric(gw->admin_port, "sluice_proxy_protocol_refused_total{reason=\"timeout\"}", 3) == 3);
    }
    SUBCASE("a truncated header, then the peer leaves") {
        connection c("127.0.0.1", gw->port);
        c.send("PROXY TCP4 203.0.113.7");
        c.shutdown_write();
        auto e = read_to_close(c);
        CHECK(e.closed);
        CHECK(e.bytes.empty());
        CHECK(eventually_metric(gw->admin_port, "sluice_proxy_protocol_refused_total{reason=\"closed\"}", 1) == 1);
    }
    SUBCASE("an untrusted peer, even with a valid header") {
        connection c("127.0.0.1", gw->port, 10s, "127.0.0.2");
        try {  // the gateway may have closed already: then the send fails
            c.send("PROXY TCP4 203.0.113.7 192.0.2.1 51234 443\r\n" + make_request("GET", "/echo"));
        } catch (const std::exception&) {
        }
        auto e = read_to_close(c);
        CHECK(e.closed);
        CHECK(e.bytes.empty());
        CHECK(eventually_metric(gw->admin_port, "sluice_proxy_protocol_refused_total{reason=\"untrusted\"}", 1) == 1);
    }
    // The gateway still serves a good header after all that.
    CHECK(client_seen(gw->port, "PROXY TCP4 203.0.113.7 192.0.2.1 51234 443\r\n") == "203.0.113.7");
}

TEST_CASE("proxy protocol: without server.proxy_protocol a PROXY header is a bad request") {
    proxy_fixture f;
    connection c("127.0.0.1", f.gw->port);
    c.send("PROXY TCP4 203.0.113.7 192.0.2.1 51234 443\r\n" + make_request("GET", "/echo"));
    CHECK(c.read_response().status == 400);
    CHECK(refused(f.gw->admin_port, "malformed") == 0);
}
