// Concurrency limits ({concurrency: N, lease: ...}) through the real gateway binary: requests
// held at the test upstream (/hold) fill the slots, the next is refused without a Retry-After,
// a slot comes back when a response ends or its client goes away (mid-body, or while the
// upstream works), leases are renewed while their requests run, and on Redis a gateway killed
// with its slots held loses them at the lease's end.
#include "e2e.hpp"

#include <csignal>
#include <optional>

using namespace sluice::test;

namespace {

std::string concurrency_yaml(const std::string& store) {
    return store + R"(
policies:
  parallel:
    ip: [ {concurrency: 2, lease: 3s}, {limit: 1000000, per: 1m} ]
routes:
  - { match: { path_prefix: / }, policy: parallel }
)";
}

std::string redis_store_yaml(std::uint16_t port) {
    return "store:\n  type: redis\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(port) + "\"], timeout: 2s }";
}

// Waits out a stretch of time that is the subject of the test (a lease running out), not a
// synchronisation: nothing else is awaited.
void let_time_pass(std::chrono::milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
}

void check_refused_in_flight(const response& r) {
    CHECK(r.status == 429);
    CHECK(r.header("RateLimit-Policy") ==
          "\"ip-concurrency\";q=2;qu=\"concurrent-requests\", \"ip-1m\";q=1000000;w=60");
    // Every tier's item, the refusing one first: the minute's t stays in view.
    CHECK(std::regex_match(r.header("RateLimit"), std::regex(R"re("ip-concurrency";r=0, "ip-1m";r=\d+;t=\d+)re")));
    CHECK_FALSE(r.has_header("Retry-After"));
    CHECK(r.body == R"({"error":"rate_limited","policy":"parallel","reason":"too many requests in flight"})");
}

// The slots this gateway's requests hold: a slot is given back just after the answer's last
// byte is written, so a client may read it a moment before.
void slots_held(std::uint16_t admin_port, double n) {
    CHECK(eventually_metric(admin_port, "sluice_concurrency_slots_held", n) == n);
}

void check_concurrency(std::uint16_t port, std::uint16_t admin_port, std::uint16_t upstream_port) {
    auto a = std::make_optional<held>(port, "a");
    held b(port, "b");
    REQUIRE(eventually([&] { return upstream_held(upstream_port) == 2; }));
    slots_held(admin_port, 2);
    check_refused_in_flight(fetch(port, "GET", "/echo"));
    CHECK(upstream_held(upstream_port) == 2);  // the refused request never reached it

    // Held past its 3 s lease, a slot is renewed, not lost.
    let_time_pass(std::chrono::milliseconds(4500));
    check_refused_in_flight(fetch(port, "GET", "/echo"));

    // A response that ends gives its slot back.
    let_go(upstream_port, "a");
    CHECK(a->conn.read_response().body == "held");
    slots_held(admin_port, 1);
    auto admitted = fetch(port, "GET", "/echo");
    CHECK(admitted.status == 200);
    CHECK(admitted.header("RateLimit").starts_with("\"ip-concurrency\";r=0"));  // b's slot and its own
    a.reset();
    slots_held(admin_port, 1);

    // A client that goes away mid-body gives its slot back too.
    {
        connection gone("127.0.0.1", port);
        gone.send("POST /hold?name=c HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\npartial");
        slots_held(admin_port, 2);
        check_refused_in_flight(fetch(port, "GET", "/echo"));
    }
    slots_held(admin_port, 1);
    CHECK(fetch(port, "GET", "/echo").status == 200);
    slots_held(admin_port, 1);  // that one's slot is given back just after its last byte

    // And one that goes away while the upstream works on its request: the request is given
    // up (nginx's default), its slot with it.
    {
        connection gone("127.0.0.1", port);
        gone.send(make_request("GET", "/hold?name=d"));
        slots_held(admin_port, 2);
    }
    slots_held(admin_port, 1);
    CHECK(fetch(port, "GET", "/echo").status == 200);
    slots_held(admin_port, 1);   // that /echo's slot given back before the next request asks
    let_go(upstream_port, "d");  // the upstream's side of it, still waiting

    // The same with a second request pipelined behind the held one: the bytes waiting to be
    // read must not hide the client's leaving (the slot stayed until the upstream answered).
    {
        connection gone("127.0.0.1", port);
        gone.send(make_request("GET", "/hold?name=e") + make_request("GET", "/echo"));
        REQUIRE(eventually([&] { return upstream_held(upstream_port) == 2; }));
        slots_held(admin_port, 2);
    }
    slots_held(admin_port, 1);
    CHECK(fetch(port, "GET", "/echo").status == 200);
    let_go(upstream_port, "e");

    let_go(upstream_port, "b");
    CHECK(b.conn.read_response().status == 200);
}

}  // namespace

TEST_CASE(
    "concurrency: N requests in flight per client, slots back at the response's end or the client's leaving "
    "(memory)") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {}, concurrency_yaml("")));
    check_concurrency(gw->port, gw->admin_port, up->port);
}

TEST_CASE("concurrency: the same on the Redis store") {
    redis_server redis(unused_port());
    auto up = start_upstream();
    // One worker, so one Redis connection: a slot's release reaches Redis before the next
    // request's check (two workers' connections could be overtaken under a slow sanitizer).
    auto gw = start_gateway(
        gateway_yaml(up->port, {{"server.threads", "1"}}, concurrency_yaml(redis_store_yaml(redis.port))));
    REQUIRE(eventually([&] { return fetch(gw->admin_port, "GET", "/readyz").status == 200; }));
    check_concurrency(gw->port, gw->admin_port, up->port);
}

TEST_CASE("concurrency: exact across a fleet on Redis, and a killed gateway's slots lapse at their lease") {
    redis_server redis(unused_port());
    auto up = start_upstream();
    const auto yaml = gateway_yaml(up->port, {}, concurrency_yaml(redis_store_yaml(redis.port)));
    auto one = start_gateway(yaml);
    auto two = start_gateway(yaml);
    for (auto* gw : {one.get(), two.get()})
        REQUIRE(eventually([&] { return fetch(gw->admin_port, "GET", "/readyz").status == 200; }));

    held a(one->port, "a");
    held b(two->port, "b");
    REQUIRE(eventually([&] { return upstream_held(up->port) == 2; }));
    for (auto* gw : {one.get(), two.get()}) check_refused_in_flight(fetch(gw->port, "GET", "/echo"));

    // Gateway one dies holding a slot: no release is sent, the lease (renewed every second)
    // still holds it for a moment, then lapses.
    one->proc->signal(SIGKILL);
    REQUIRE(one->proc->wait_exit(std::chrono::seconds(5)).has_value());
    const auto killed = std::chrono::steady_clock::now();
    check_refused_in_flight(fetch(two->port, "GET", "/echo"));
    REQUIRE(eventually([&] { return fetch(two->port, "GET", "/echo").status == 200; }));
    CHECK(std::chrono::steady_clock::now() - killed < std::chrono::seconds(5));

    let_go(up->port, "b");
    CHECK(b.conn.read_response().status == 200);
}
