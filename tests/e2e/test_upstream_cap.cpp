// A pool's in-flight cap (max_in_flight) and its queue through the real gateway binary:
// requests held at the test upstream (/hold) fill the slots, the next is answered 503
// upstream_busy with Retry-After: 1, or waits in the queue and goes on when a slot is given
// back; on Redis the cap is shared by two gateways, and a killed gateway's slots come back
// at their lease's end.
#include "e2e.hpp"

#include <csignal>
#include <optional>

using namespace sluice::test;

namespace {

using std::chrono::steady_clock;

constexpr auto busy_body =
    R"({"error":"upstream_busy","message":"the upstream pool has max_in_flight requests in flight"})";

void check_busy(const response& r) {
    CHECK(r.status == 503);
    CHECK(r.header("Retry-After") == "1");
    CHECK(r.header("Content-Type") == "application/json");
    CHECK(r.body == busy_body);
}

double pool_metric(std::uint16_t admin_port, const std::string& family) {
    return metric_value(fetch(admin_port, "GET", "/metrics").body, family + "{upstream=\"default\"}");
}

// Whether the gateway has answered on `c` yet (without waiting).
bool answered(const connection& c) {
    pollfd p{c.fd(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
}

// Sends a held request named `name` through `port`: true once it is admitted (the upstream
// holds `held_then`), false when it was answered (refused).
bool admitted(std::optional<held>& h, std::uint16_t port, const std::string& name, std::uint16_t upstream_port,
              std::int64_t held_then) {
    h.emplace(port, name);
    const bool settled = eventually([&] { return upstream_held(upstream_port) == held_then || answered(h->conn); },
                                    std::chrono::seconds(2));
    return settled && !answered(h->conn);
}

std::string redis_store_yaml(std::uint16_t port) {
    return "store:\n  type: redis\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(port) + "\"], timeout: 2s }\n";
}

}  // namespace

TEST_CASE("upstream cap: max_in_flight refuses past N with 503 upstream_busy and Retry-After (memory)") {
    auto up = start_upstream();
    // One worker: a slot is given back before that worker reads the next request.
    auto gw = start_gateway(gateway_yaml(up->port, {{"server.threads", "1"}, {"upstream.max_in_flight", "2"}}));

    auto a = std::make_optional<held>(gw->port, "a");
    held b(gw->port, "b");
    REQUIRE(eventually([&] { return upstream_held(up->port) == 2; }));
    for (int i = 0; i < 3; ++i) check_busy(fetch(gw->port, "GET", "/echo"));
    CHECK(upstream_held(up->port) == 2);  // the refused requests never reached it
    CHECK(pool_metric(gw->admin_port, "sluice_upstream_busy_total") == 3);

    // A response that ends gives its slot back (just after its last byte is written).
    let_go(up->port, "a");
    CHECK(a->conn.read_response().body == "held");
    a.reset();
    for (int i = 0; i < 3; ++i) CHECK(fetch(gw->port, "GET", "/echo").status == 200);

    let_go(up->port, "b");
    CHECK(b.conn.read_response().status == 200);
    // Both slots free again: two held at once pass.
    held c(gw->port, "c"), d(gw->port, "d");
    REQUIRE(eventually([&] { return upstream_held(up->port) == 2; }));
    check_busy(fetch(gw->port, "GET", "/echo"));
    let_go(up->port, "c");
    let_go(up->port, "d");
    CHECK(c.conn.read_response().status == 200);
    CHECK(d.conn.read_response().status == 200);
}

TEST_CASE(
    "upstream cap: the queue waits for a slot, refuses beyond its size, times out, and lets a leaving "
    "client go (memory)") {
    auto up = start_upstream();
    // One worker: one queue of size 1.
    auto gw = start_gateway(gateway_yaml(
        up->port,
        {{"server.threads", "1"}, {"upstream.max_in_flight", "2"}, {"upstream.queue", "{size: 1, timeout: 2s}"}}));
    auto a = std::make_optional<held>(gw->port, "a");
    held b(gw->port, "b");
    REQUIRE(eventually([&] { return upstream_held(up->port) == 2; }));

    // The third waits in the queue.
    connection queued("127.0.0.1", gw->port);
    queued.send(make_request("GET", "/echo"));
    REQUIRE(eventually([&] { return pool_metric(gw->admin_port, "sluice_upstream_queued_total") == 1; }));

    // A fourth finds the queue full: 503 at once.
    auto asked = steady_clock::now();
    check_busy(fetch(gw->port, "GET", "/echo"));
    CHECK(steady_clock::now() - asked < std::chrono::seconds(1));
    CHECK_FALSE(answered(queued));

    // A slot given back: the waiting request goes on, soon after and not before.
    let_go(up->port, "a");
    const auto let_go_at = steady_clock::now();
    CHECK(a->conn.read_response().status == 200);
    const auto r = queued.read_response();
    CHECK(r.status == 200);
    CHECK(json_of(r).at("target").as_string() == "/echo");
    CHECK(steady_clock::now() - let_go_at < std::chrono::seconds(1));
    a.reset();

    // Full again (b and c): a waiting request that gets no slot is refused after queue.timeout.
    held c(gw->port, "c");
    REQUIRE(eventually([&] { return upstream_held(up->port) == 2; }));
    asked = steady_clock::now();
    check_busy(fetch(gw->port, "GET", "/echo"));
    const auto waited = steady_clock::now() - asked;
    CHECK(waited >= std::chrono::milliseconds(1900));
    CHECK(waited < std::chrono::seconds(4));

    // A client that leaves while waiting ends its wait (its place in the queue with it):
    // the request is logged 499 well before the timeout, and the next one may wait again.
    const std::string gone_sample = "sluice_requests_total{route=\"unmatched\",status=\"4xx\"}";
    const double gone_before = std::max(0.0, metric_value(fetch(gw->admin_port, "GET", "/metrics").body, gone_sample));
    asked = steady_clock::now();
    {
        connection gone("127.0.0.1", gw->port);
        gone.send(make_request("GET", "/echo"));
        REQUIRE(eventually([&] { return pool_metric(gw->admin_port, "sluice_upstream_queued_total") == 3; }));
    }
    CHECK(eventually_metric(gw->admin_port, gone_sample, gone_before + 1) == gone_before + 1);
    CHECK(steady_clock::now() - asked < std::chrono::milliseconds(1500));
    connection next("127.0.0.1", gw->port);
    next.send(make_request("GET", "/echo"));
    REQUIRE(eventually([&] { return pool_metric(gw->admin_port, "sluice_upstream_queued_total") == 4; }));
    let_go(up->port, "b");
    CHECK(b.conn.read_response().status == 200);
    CHECK(next.read_response().status == 200);

    let_go(up->port, "c");
    CHECK(c.conn.read_response().status == 200);
    CHECK(pool_metric(gw->admin_port, "sluice_upstream_busy_total") == 2);
}

TEST_CASE("upstream cap: exact across two gateways on Redis, and a killed gateway's slots come back at their lease") {
    redis_server redis(unused_port());
    auto up = start_upstream();
    // One worker each: a slot's release reaches Redis before that gateway's next check.
    const auto yaml = gateway_yaml(
        up->port, {{"server.threads", "1"}, {"upstream.max_in_flight", "3"}, {"upstream.max_in_flight_lease", "3s"}},
        redis_store_yaml(redis.port));
    auto one = start_gateway(yaml);
    auto two = start_gateway(yaml);
    for (auto* gw : {one.get(), two.get()})
        REQUIRE(eventually([&] { return fetch(gw->admin_port, "GET", "/readyz").status == 200; }));

    // Three held, through both gateways: the cap is full for both.
    held a(one->port, "a"), b(one->port, "b"), c(two->port, "c");
    REQUIRE(eventually([&] { return upstream_held(up->port) == 3; }));
    for (int i = 0; i < 3; ++i)
        for (auto* gw : {one.get(), two.get()}) {
            // Held requests too: were one admitted, it would stay in flight.
            held extra(gw->port, "extra");
            const auto r = extra.conn.read_response();
            check_busy(r);
            CHECK(upstream_held(up->port) == 3);
        }
    CHECK(upstream_held(up->port) == 3);

    // Gateway one dies holding two slots: no release is sent; they lapse with their lease.
    one->proc->signal(SIGKILL);
    REQUIRE(one->proc->wait_exit(std::chrono::seconds(5)).has_value());
    const auto killed = steady_clock::now();
    let_go(up->port, "a");  // the upstream's side of them, still waiting
    let_go(up->port, "b");
    check_busy(fetch(two->port, "GET", "/echo"));
    // The two slots may lapse up to a renewal apart: each is taken once it is back.
    std::optional<held> d, e;
    REQUIRE(eventually([&] { return admitted(d, two->port, "d", up->port, 2); }, std::chrono::seconds(10)));
    REQUIRE(eventually([&] { return admitted(e, two->port, "e", up->port, 3); }, std::chrono::seconds(10)));
    // Within a lease (3 s) and a renewal's lateness (1 s) of the kill.
    CHECK(steady_clock::now() - killed < std::chrono::seconds(5));
    check_busy(fetch(two->port, "GET", "/echo"));
    CHECK(upstream_held(up->port) == 3);

    for (const char* name : {"c", "d", "e"}) let_go(up->port, name);
    CHECK(c.conn.read_response().status == 200);
    CHECK(d->conn.read_response().status == 200);
    CHECK(e->conn.read_response().status == 200);
}
