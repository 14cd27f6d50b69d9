// The session's answers of its own (server/session.cpp, exchange.cpp), in process: a real
// worker with a memory store on one io_context the test drives, a scripted upstream on a
// loopback acceptor, and a client socket writing raw bytes. No gateway process, so each
// failure path is reached exactly and quickly; the e2e suite covers the same through the
// binary.
#include "server/session.hpp"

#include "http/async.hpp"
#include "server/snapshot.hpp"
#include "store/memory_store.hpp"

#include <doctest/doctest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/parse.hpp>

#include <functional>
#include <sstream>
#include <string>

namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using namespace asio::experimental::awaitable_operators;  // a && b: both at once
using sluice::http::use_tuple;
using response = bhttp::response<bhttp::string_body>;

const tcp::endpoint loopback{asio::ip::make_address("127.0.0.1"), 0};

// One worker serving on a loopback port, and an acceptor the test plays the upstream on.
struct rig {
    sluice::metrics::registry metrics{1};
    sluice::store::memory_store store{1000};
    std::atomic<std::size_t> open{0};
    std::unique_ptr<sluice::server::worker> w;
    std::optional<tcp::acceptor> upstream;

    explicit rig(const std::string& yaml = {}) {
        auto cfg = sluice::config::load_string(
            "upstream: { url: \"http://127.0.0.1:9\", connect_timeout: 300ms, timeout: 300ms }\n"
            "server: { header_timeout: 300ms, max_header_bytes: 1024 }\n" +
                yaml,
            "session.yaml");
        auto snap = std::make_shared<const sluice::server::snapshot>(cfg, metrics);
        w = std::make_unique<sluice::server::worker>(snap, metrics.worker(0), open, 100, store,
                                                     sluice::identity::hasher(""));
        upstream.emplace(w->ioc, loopback);
        // The pool's one server is the acceptor the test plays the upstream on.
        const auto& pool_cfg = cfg->upstreams.front();
        auto pool = std::make_shared<sluice::upstream::pool>(cfg, pool_cfg);
        pool->publish(sluice::upstream::make_members(
            {std::make_shared<sluice::upstream::server>(pool_cfg.servers.front(), upstream->local_endpoint())}));
        w->set_snapshot(
            std::make_shared<const sluice::server::snapshot>(cfg, metrics, sluice::upstream::pool_list{pool}));
        w->acceptor.open(loopback.protocol());
        w->acceptor.bind(loopback);
        w->acceptor.listen();
    }

    // Runs `test` against the worker, then drains it: every session must have ended.
    void run(std::function<awaitable<void>()> test) {
        w->start();
        w->accept();
        bool done = false, drained = false;
        std::exception_ptr error;
        asio::co_spawn(w->ioc, test(), [&](std::exception_ptr e) {
            done = true;
            error = e;
            boost::system::error_code ignored;
            upstream->close(ignored);
            w->begin_drain([&] {
                drained = true;
                w->ioc.stop();
            });
        });
        w->ioc.run_for(std::chrono::seconds(20));
        REQUIRE(done);
        if (error) std::rethrow_exception(error);
        CHECK(drained);
        CHECK(open == 0);
    }

    awaitable<tcp::socket> connect() {
        tcp::socket s(w->ioc);
        co_await s.async_connect(w->acceptor.local_endpoint(), asio::use_awaitable);
        co_return s;
    }

    // Accepts one upstream connection and reads its request head.
    awaitable<tcp::socket> accept_upstream() {
        auto s = co_await upstream->async_accept(asio::use_awaitable);
        boost::beast::flat_buffer buf;
        bhttp::request_parser<bhttp::empty_body> p;
        co_await bhttp::async_read_header(s, buf, p, asio::use_awaitable);
        co_return s;
    }

    // The sum of sluice_requests_total over its labels.
    std::uint64_t requests_counted() {
        std::istringstream text(metrics.scrape());
        std::uint64_t sum = 0;
        for (std::string line; std::getline(text, line);) {
            if (line.starts_with("sluice_requests_total{")) sum += std::stoull(line.substr(line.rfind(' ') + 1));
        }
        return sum;
    }
};

awaitable<response> ask(tcp::socket& s, const std::string& request) {
    co_await asio::async_write(s, asio::buffer(request), asio::use_awaitable);
    boost::beast::flat_buffer buf;
    response r;
    co_await bhttp::async_read(s, buf, r, asio::use_awaitable);
    co_return r;
}

// Whether the gateway closed the connection (after its answer was read whole).
awaitable<bool> closed_by_gateway(tcp::socket& s) {
    char c;
    auto [ec, n] = co_await s.async_read_some(asio::buffer(&c, 1), use_tuple);
    co_return ec == asio::error::eof || ec == asio::error::connection_reset;
}

std::string code_of(const response& r) {
    return std::string(boost::json::parse(r.body()).as_object().at("error").as_string());
}

const std::string get = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n";

}  // namespace

TEST_CASE("session: a malformed request line gets 400 bad_request, and the connection closes") {
    rig t;
    t.run([&]() -> awaitable<void> {
        auto c = co_await t.connect();
        auto r = co_await ask(c, "GET /x HTTP/1.1 trailing\r\nHost: a\r\n\r\n");
        CHECK(r.result_int() == 400);
        CHECK(code_of(r) == "bad_request");
        CHECK(r[bhttp::field::content_type] == "application/json");
        CHECK(co_await closed_by_gateway(c));
    });
    CHECK(t.requests_counted() == 1);
}

TEST_CASE("session: two Host fields, a lower-case method, a head over max_header_bytes") {
    rig t;
    t.run([&]() -> awaitable<void> {
        auto c = co_await t.connect();
        auto r = co_await ask(c, "GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n");
        CHECK(r.result_int() == 400);
        CHECK(r.body().find("exactly one Host") != std::string::npos);

        auto d = co_await t.connect();
        r = co_await ask(d, "post /x HTTP/1.1\r\nHost: a\r\n\r\n");
        CHECK(r.result_int() == 400);
        CHECK(r.body().find("case-sensitive") != std::string::npos);

        auto e = co_await t.connect();
        r = co_await ask(e, "GET /x HTTP/1.1\r\nHost: a\r\nX-Big: " + std::string(2000, 'b') + "\r\n\r\n");
        CHECK(r.result_int() == 431);
        CHECK(code_of(r) == "header_too_large");
        CHECK(co_await closed_by_gateway(e));
    });
    CHECK(t.requests_counted() == 3);
}

TEST_CASE("session: a head that stops coming gets 408 after server.header_timeout") {
    rig t;
    t.run([&]() -> awaitable<void> {
        auto c = co_await t.connect();
        const auto start = sluice::http::clock::now();
        auto r = co_await ask(c, "GET /x HTTP/1.1\r\nHost: a\r\n");
        CHECK(r.result_int() == 408);
        CHECK(code_of(r) == "request_timeout");
        CHECK(sluice::http::clock::now() - start >= std::chrono::milliseconds(250));  // the timer may start first
        CHECK(co_await closed_by_gateway(c));
    });
}

TEST_CASE("session: an upstream that refuses gets 502 bad_gateway, and the client connection stays open") {
    rig t;
    t.upstream->close();  // nothing listens on its port any more
    t.run([&]() -> awaitable<void> {
        auto c = co_await t.connect();
        for (int i = 0; i < 2; ++i) {
            auto r = co_await ask(c, get);
            CHECK(r.result_int() == 502);
            CHECK(code_of(r) == "bad_gateway");
            CHECK(r.keep_alive());
        }
    });
    CHECK(t.requests_counted() == 2);
}

TEST_CASE("session: an upstream that closes, answers garbage, or stays silent") {
    rig t;
    t.run([&]() -> awaitable<void> {
        auto c = co_await t.connect();

        auto closes = [&]() -> awaitable<void> { (co_await t.accept_upstream()).close(); };
        auto r = co_await (ask(c, get) && closes());
        CHECK(r.result_int() == 502);
        CHECK(r.body().find("closed the connection without a response") != std::string::npos);

        auto garbage = [&]() -> awaitable<void> {
            auto u = co_await t.accept_upstream();
            co_await asio::async_write(u, asio::buffer(std::string("HTTP/1.1 2x0 OK\r\n\r\n")), asio::use_awaitable);
        };
        r = co_await (ask(c, get) && garbage());
        CHECK(r.result_int() == 502);
        CHECK(r.body().find("invalid response") != std::string::npos);

        std::optional<tcp::socket> held;
        auto silent = [&]() -> awaitable<void> { held.emplace(co_await t.accept_upstream()); };
        const auto start = sluice::http::clock::now();
        r = co_await (ask(c, get) && silent());
        CHECK(r.result_int() == 504);
        CHECK(code_of(r) == "upstream_timeout");
        CHECK(sluice::http::clock::now() - start >= std::chrono::milliseconds(300));
        CHECK(r.keep_alive());
    });
    CHECK(t.requests_counted() == 3);
}

TEST_CASE("session: a limited request gets 429 with Retry-After, and the connection serves the next") {
    rig t(R"(
policies: { p: { ip: [ { limit: 1, per: 1h, algorithm: fixed } ] } }
routes: [ { match: { path_prefix: / }, policy: p } ]
)");
    t.run([&]() -> awaitable<void> {
        auto c = co_await t.connect();
        auto serves = [&]() -> awaitable<void> {
            auto u = co_await t.accept_upstream();
            co_await asio::async_write(u, asio::buffer(std::string("HTTP/1.1 204 No Content\r\n\r\n")),
                                       asio::use_awaitable);
        };
        auto r = co_await (ask(c, get) && serves());
        CHECK(r.result_int() == 204);
        for (int i = 0; i < 2; ++i) {
            r = co_await ask(c, get);
            CHECK(r.result_int() == 429);
            CHECK(code_of(r) == "rate_limited");
            CHECK(std::stoi(std::string(r[bhttp::field::retry_after])) > 0);
            CHECK(r.keep_alive());
        }
    });
    CHECK(t.requests_counted() == 3);
}

TEST_CASE("session: a client that leaves mid-request is counted once, and the gauge goes back to zero") {
    rig t;
    t.run([&]() -> awaitable<void> {
        std::optional<tcp::socket> held;
        {
            auto c = co_await t.connect();
            auto sends = [&]() -> awaitable<void> {
                co_await asio::async_write(c, asio::buffer(get), asio::use_awaitable);
            };
            co_await (sends() && [&]() -> awaitable<void> { held.emplace(co_await t.accept_upstream()); }());
            CHECK(t.open == 1);  // the request reached the upstream: now the client goes
        }
        // The session sees the client gone when the upstream's answer is due at the latest.
        char byte;
        auto [ec, n] = co_await held->async_read_some(asio::buffer(&byte, 1), use_tuple);
        CHECK(ec);  // the gateway closed its upstream connection: the exchange was abandoned
    });
    CHECK(t.requests_counted() == 1);
}
