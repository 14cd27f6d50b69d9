// Envoy's rate-limit service (RLS v3) over gRPC, through the real binary: a grpc++ client of
// the test's own (proto/, as Envoy's client speaks it) against service.grpc_listen.
#include "cluster_support.hpp"
#include "e2e.hpp"

#include <envoy/service/ratelimit/v3/rls.grpc.pb.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <csignal>
#include <mutex>

using namespace sluice::test;
using namespace std::chrono;

namespace {

namespace rls = envoy::service::ratelimit::v3;
using rls_response = rls::RateLimitResponse;

struct descriptor {
    descriptor(std::vector<std::pair<std::string, std::string>> e, std::optional<std::uint64_t> h = std::nullopt)
        : entries(std::move(e)), hits(h) {}
    std::vector<std::pair<std::string, std::string>> entries;
    std::optional<std::uint64_t> hits;  // the descriptor's own hits_addend
};

rls::RateLimitRequest request(const std::string& domain, const std::vector<descriptor>& ds, std::uint32_t hits = 0) {
    rls::RateLimitRequest r;
    r.set_domain(domain);
    r.set_hits_addend(hits);
    for (const auto& d : ds) {
        auto* out = r.add_descriptors();
        for (const auto& [k, v] : d.entries) {
            auto* e = out->add_entries();
            e->set_key(k);
            e->set_value(v);
        }
        if (d.hits) out->mutable_hits_addend()->set_value(*d.hits);
    }
    return r;
}

std::string header(const rls_response& r, const std::string& name) {
    for (const auto& h : r.response_headers_to_add())
        if (h.key() == name) return h.value();
    return "";
}

// A gateway (and its test upstream) with the rate-limit service on a kernel-chosen port.
struct rls_gateway {
    explicit rls_gateway(const std::string& service_yaml, const std::string& store_yaml = "",
                         const yaml_overrides& overrides = {}) {
        up = start_upstream();
        gw = start_gateway(
            gateway_yaml(up->port, overrides, store_yaml + "service:\n  grpc_listen: \"127.0.0.1:0\"\n" + service_yaml),
            {}, {{"SLUICE_HASH_SECRET", "rls-secret"}});
        const auto m = gw->proc->wait_for_line(R"(rate-limit service \(gRPC\) listening on 127\.0\.0\.1:(\d+))");
        port = static_cast<std::uint16_t>(std::stoi(m[1]));
        stub = rls::RateLimitService::NewStub(
            grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
    }

    grpc::Status call(const rls::RateLimitRequest& r, rls_response& out, milliseconds deadline = 5s) const {
        grpc::ClientContext ctx;
        ctx.set_deadline(system_clock::now() + deadline);
        out.Clear();
        return stub->ShouldRateLimit(&ctx, r, &out);
    }
    // The answer to a call that must succeed.
    rls_response ask(const rls::RateLimitRequest& r) const {
        rls_response out;
        const auto s = call(r, out);
        REQUIRE_MESSAGE(s.ok(), s.error_message());
        return out;
    }

    std::unique_ptr<upstream_server> up;
    std::unique_ptr<gateway> gw;
    std::uint16_t port = 0;
    std::unique_ptr<rls::RateLimitService::Stub> stub;
};

const std::string api_domains = R"(  domains:
    api:
      descriptors:
        - { key: remote_address, tiers: [ {limit: 3, per: 1m, algorithm: log} ] }
        - { key: tight, tiers: [ {limit: 1, per: 1m, algorithm: log} ] }
        - { key: roomy, tiers: [ {limit: 5, per: 1m, algorithm: log} ] }
        - { key: short, tiers: [ {limit: 1, per: 2s, algorithm: log} ] }
        - { key: ten, tiers: [ {limit: 10, per: 1m, algorithm: log} ] }
        - key: path
          value: /login
          descriptors: [ { key: remote_address, tiers: [ {limit: 2, per: 1m, algorithm: log} ] } ]
)";

// Exactly the limit, then OVER_LIMIT with its fields: the same checks on any store.
void exact_at_the_limit(const rls_gateway& g) {
    const auto one = request("api", {{{{"remote_address", "10.0.0.1"}}}});
    for (int i = 0; i < 3; ++i) {
        const auto r = g.ask(one);
        CHECK(r.overall_code() == rls_response::OK);
        REQUIRE(r.statuses_size() == 1);
        const auto& s = r.statuses(0);
        CHECK(s.code() == rls_response::OK);
        CHECK(s.current_limit().requests_per_unit() == 3);
        CHECK(s.current_limit().unit() == rls_response::RateLimit::MINUTE);
        CHECK(s.limit_remaining() == static_cast<std::uint32_t>(2 - i));
        CHECK(header(r, "Retry-After").empty());
        CHECK(header(r, "RateLimit-Policy").find(";q=3;w=60") != std::string::npos);
    }
    const auto over = g.ask(one);
    CHECK(over.overall_code() == rls_response::OVER_LIMIT);
    CHECK(over.statuses(0).code() == rls_response::OVER_LIMIT);
    CHECK(over.statuses(0).limit_remaining() == 0);
    const auto reset = over.statuses(0).duration_until_reset();
    CHECK(reset.seconds() * 1'000'000'000LL + reset.nanos() > 55'000'000'000LL);  // the oldest entry leaves at 60 s
    CHECK(reset.seconds() < 60);
    const auto retry = header(over, "Retry-After");
    REQUIRE(!retry.empty());
    CHECK(std::stoi(retry) == reset.seconds() + (reset.nanos() > 0 ? 1 : 0));
    CHECK(header(over, "RateLimit").find(";r=0;") != std::string::npos);
    // Another value is another identifier.
    CHECK(g.ask(request("api", {{{{"remote_address", "10.0.0.2"}}}})).overall_code() == rls_response::OK);
}

// A call refused on one descriptor counts nothing on the other: the same checks on any store.
void refused_consumes_nothing(const rls_gateway& g) {
    const auto both = request("api", {{{{"tight", "a"}}}, {{{"roomy", "b"}}}});
    CHECK(g.ask(both).overall_code() == rls_response::OK);
    const auto refused = g.ask(both);
    CHECK(refused.overall_code() == rls_response::OVER_LIMIT);
    REQUIRE(refused.statuses_size() == 2);
    CHECK(refused.statuses(0).code() == rls_response::OVER_LIMIT);
    CHECK(refused.statuses(1).code() == rls_response::OK);
    // roomy counted the first call only: four left, and exactly four more pass.
    for (int i = 0; i < 4; ++i) {
        const auto r = g.ask(request("api", {{{{"roomy", "b"}}}}));
        CHECK(r.overall_code() == rls_response::OK);
        CHECK(r.statuses(0).limit_remaining() == static_cast<std::uint32_t>(3 - i));
    }
    CHECK(g.ask(request("api", {{{{"roomy", "b"}}}})).overall_code() == rls_response::OVER_LIMIT);
}

// Counted descriptors of different costs (their own hits_addend) are one store request per
// cost, asked in turn; one a later request refuses gives back the earlier ones exactly: the
// same checks on any store.
void costs_apart_consume_nothing(const rls_gateway& g) {
    const descriptor a{{{"ten", "a"}}, 1}, b{{{"ten", "b"}}, 4};
    const auto both = request("api", {a, b});
    for (int i = 0; i < 2; ++i) {
        const auto r = g.ask(both);
        CHECK(r.overall_code() == rls_response::OK);
        REQUIRE(r.statuses_size() == 2);
        CHECK(r.statuses(0).limit_remaining() == static_cast<std::uint32_t>(9 - i));
        CHECK(r.statuses(1).limit_remaining() == static_cast<std::uint32_t>(6 - 4 * i));
    }
    // b has 2 left: 4 more do not fit. a (cost 1, asked first) was admitted, then given back.
    const auto refused = g.ask(both);
    CHECK(refused.overall_code() == rls_response::OVER_LIMIT);
    REQUIRE(refused.statuses_size() == 2);
    CHECK(refused.statuses(0).code() == rls_response::OK);
    CHECK(refused.statuses(1).code() == rls_response::OVER_LIMIT);
    CHECK(refused.statuses(1).limit_remaining() == 2);  // what is left, short of the 4 asked
    CHECK(!header(refused, "Retry-After").empty());
    const auto text = fetch(g.gw->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(text, R"(sluice_rls_taken_back_total{result="done"})") == 1);
    // a counted the two admitted calls only: exactly 8 more single calls pass.
    const auto one_a = request("api", {descriptor{{{"ten", "a"}}, std::nullopt}});
    for (int i = 0; i < 8; ++i) {
        const auto r = g.ask(one_a);
        CHECK(r.overall_code() == rls_response::OK);
        CHECK(r.statuses(0).limit_remaining() == static_cast<std::uint32_t>(7 - i));
    }
    CHECK(g.ask(one_a).overall_code() == rls_response::OVER_LIMIT);
    // b counted 8: its last 2 fit.
    const auto last_b = g.ask(request("api", {descriptor{{{"ten", "b"}}, 2}}));
    CHECK(last_b.overall_code() == rls_response::OK);
    CHECK(last_b.statuses(0).limit_remaining() == 0);
}

}  // namespace

TEST_CASE("rls: a descriptor is allowed up to exactly its limit, then OVER_LIMIT with Retry-After (memory)") {
    rls_gateway g(api_domains);
    exact_at_the_limit(g);
}

TEST_CASE("rls: a call refused on one descriptor consumes nothing on the others") {
    rls_gateway g(api_domains);
    refused_consumes_nothing(g);
}

TEST_CASE("rls: hits_addend is the cost, per call and per descriptor, and 0 asks without counting") {
    rls_gateway g(api_domains);
    const descriptor roomy{{{"roomy", "c"}}, std::nullopt};
    auto r = g.ask(request("api", {roomy}, 3));
    CHECK(r.overall_code() == rls_response::OK);
    CHECK(r.statuses(0).limit_remaining() == 2);
    CHECK(g.ask(request("api", {roomy}, 3)).overall_code() == rls_response::OVER_LIMIT);  // 3 > 2 left
    // A descriptor's own hits_addend wins over the call's; 0 asks.
    const descriptor ask_only{{{"roomy", "c"}}, 0};
    for (int i = 0; i < 3; ++i) {
        r = g.ask(request("api", {ask_only}, 5));
        CHECK(r.overall_code() == rls_response::OK);
        CHECK(r.statuses(0).limit_remaining() == 2);
    }
    r = g.ask(request("api", {descriptor{{{"roomy", "c"}}, 2}}));
    CHECK(r.overall_code() == rls_response::OK);
    CHECK(r.statuses(0).limit_remaining() == 0);
    CHECK(g.ask(request("api", {ask_only})).statuses(0).limit_remaining() == 0);
}

TEST_CASE("rls: counted descriptors of different costs are decided in turn, and a refused call consumes nothing") {
    rls_gateway g(api_domains);
    costs_apart_consume_nothing(g);
}

TEST_CASE("rls: on Redis, counted descriptors of different costs are decided in turn, a refusal consumes nothing") {
    redis_server redis(unused_port());
    const std::string store =
        "store:\n  type: redis\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(redis.port) +
        "\"], timeout: 2s }\n";
    rls_gateway g(api_domains, store);
    costs_apart_consume_nothing(g);
}

TEST_CASE("rls: nested descriptors match key and value in order, and unknown ones are allowed, not limited") {
    rls_gateway g(api_domains);
    const auto login = request("api", {{{{"path", "/login"}, {"remote_address", "10.0.0.9"}}}});
    for (int i = 0; i < 2; ++i) {
        const auto r = g.ask(login);
        CHECK(r.overall_code() == rls_response::OK);
        CHECK(r.statuses(0).current_limit().requests_per_unit() == 2);
    }
    CHECK(g.ask(login).overall_code() == rls_response::OVER_LIMIT);
    // The nested counter is its own: the top-level remote_address of the same value is untouched.
    CHECK(g.ask(request("api", {{{{"remote_address", "10.0.0.9"}}}})).statuses(0).limit_remaining() == 2);
    // Another path, an unknown key, an unknown domain: OK, without a limit.
    for (const auto& r : {request("api", {{{{"path", "/other"}, {"remote_address", "10.0.0.9"}}}}),
                          request("api", {{{{"nobody", "x"}}}}), request("elsewhere", {{{{"remote_address", "x"}}}})}) {
        for (int i = 0; i < 5; ++i) {
            const auto a = g.ask(r);
            CHECK(a.overall_code() == rls_response::OK);
            REQUIRE(a.statuses_size() == 1);
            CHECK(a.statuses(0).code() == rls_response::OK);
            CHECK(!a.statuses(0).has_current_limit());
        }
    }
}

TEST_CASE("rls: duration_until_reset and Retry-After are the exact wait, and malformed calls are INVALID_ARGUMENT") {
    rls_gateway g(api_domains);
    const auto one = request("api", {{{{"short", "s"}}}});
    const auto sent = steady_clock::now();
    CHECK(g.ask(one).overall_code() == rls_response::OK);
    const auto over = g.ask(one);
    REQUIRE(over.overall_code() == rls_response::OVER_LIMIT);
    const auto reset = over.statuses(0).duration_until_reset();
    const auto wait_ns = reset.seconds() * 1'000'000'000LL + reset.nanos();
    const auto elapsed_ns = duration_cast<nanoseconds>(steady_clock::now() - sent).count();
    CHECK(wait_ns <= 2'000'000'000LL);
    CHECK(wait_ns >= 2'000'000'000LL - elapsed_ns - 1'000'000);  // the entry leaves 2 s after it was admitted
    CHECK(header(over, "Retry-After") == "2");
    // The call passes again once that wait has passed, and not before.
    const auto refused_at = steady_clock::now();
    CHECK(eventually(
        [&] {
            std::this_thread::sleep_for(milliseconds(2));  // a poll interval
            return g.ask(one).overall_code() == rls_response::OK;
        },
        seconds(4)));
    CHECK(steady_clock::now() - refused_at >= nanoseconds(wait_ns) - milliseconds(5));

    rls_response out;
    CHECK(g.call(request("", {{{{"short", "s"}}}}), out).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(g.call(request("api", {}), out).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    std::vector<descriptor> nine;
    for (int i = 0; i < 9; ++i) nine.push_back({{{"roomy", std::to_string(i)}}, std::nullopt});
    const auto s = g.call(request("api", nine), out);
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(s.error_message().find("more than 8") != std::string::npos);
}

TEST_CASE("rls: on Redis, exact at the limit, and two gateways on one Redis are exact together") {
    redis_server redis(unused_port());
    const std::string store =
        "store:\n  type: redis\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(redis.port) +
        "\"], timeout: 2s }\n";
    rls_gateway a(api_domains, store);
    exact_at_the_limit(a);

    rls_gateway b(api_domains, store);
    // roomy allows 5 per minute: 12 calls alternating between the gateways admit exactly 5.
    int admitted = 0;
    for (int i = 0; i < 12; ++i) {
        const auto& g = i % 2 == 0 ? a : b;
        if (g.ask(request("api", {{{{"roomy", "fleet"}}}})).overall_code() == rls_response::OK) ++admitted;
    }
    CHECK(admitted == 5);
}

TEST_CASE("rls: metrics count calls by code, and descriptors by domain, kind and result") {
    rls_gateway g(api_domains);
    const auto tight = request("api", {{{{"tight", "m"}}}, {{{"nobody", "x"}}}});
    CHECK(g.ask(tight).overall_code() == rls_response::OK);
    CHECK(g.ask(tight).overall_code() == rls_response::OVER_LIMIT);
    CHECK(g.ask(request("elsewhere", {{{{"tight", "m"}}}})).overall_code() == rls_response::OK);
    rls_response out;
    CHECK(g.call(request("", {{{{"tight", "m"}}}}), out).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    // Counted before the answer is sent: the scrape that follows sees them.
    const auto text = fetch(g.gw->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(text, R"(sluice_rls_calls_total{code="ok"})") == 2);
    CHECK(metric_value(text, R"(sluice_rls_calls_total{code="over_limit"})") == 1);
    CHECK(metric_value(text, R"(sluice_rls_calls_total{code="invalid_argument"})") == 1);
    CHECK(metric_value(
              text, R"(sluice_rls_descriptors_total{domain="api",descriptor="descriptor:tight",result="allowed"})") ==
          1);
    CHECK(metric_value(
              text, R"(sluice_rls_descriptors_total{domain="api",descriptor="descriptor:tight",result="limited"})") ==
          1);
    CHECK(metric_value(text, R"(sluice_rls_descriptors_total{domain="api",descriptor="unknown",result="unknown"})") ==
          2);
    const std::string unknown_domain =
        R"x(sluice_rls_descriptors_total{domain="(unknown)",descriptor="unknown",result="unknown"})x";
    CHECK(metric_value(text, unknown_domain) == 1);
    CHECK(metric_value(text, "sluice_rls_call_duration_seconds_count") == 4);
}

TEST_CASE("rls: the gRPC health service answers SERVING") {
    rls_gateway g(api_domains);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(g.port), grpc::InsecureChannelCredentials());
    grpc::GenericStub stub(channel);
    // grpc.health.v1.HealthCheckRequest{service: ""} is empty; HealthCheckResponse{status:
    // SERVING} is field 1 = 1, the bytes 08 01.
    grpc::ClientContext ctx;
    ctx.set_deadline(system_clock::now() + 5s);
    grpc::Slice empty;
    grpc::ByteBuffer request_bytes(&empty, 1), response_bytes;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request_bytes, &response_bytes,
                   [&](grpc::Status s) {
                       std::lock_guard lock(mu);
                       status = std::move(s);
                       done = true;
                       cv.notify_one();
                   });
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, 10s, [&] { return done; }));
    REQUIRE_MESSAGE(status.ok(), status.error_message());
    std::vector<grpc::Slice> slices;
    REQUIRE(response_bytes.Dump(&slices).ok());
    std::string bytes;
    for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
    CHECK(bytes == std::string("\x08\x01", 2));
}

TEST_CASE("rls: on a Redis Cluster, exact at the limit, and a refused call consumes nothing on any node") {
    cluster_nodes c(3, 0);
    const std::string store = "store:\n  type: redis-cluster\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" +
                              std::to_string(c.ports[0]) + "\"], timeout: 2s }\n";
    rls_gateway g(api_domains, store);
    exact_at_the_limit(g);
    refused_consumes_nothing(g);
}

TEST_CASE("rls: an envoyproxy/ratelimit config file loads unchanged through service.ratelimit_config_files") {
    const std::string dir = make_temp_dir();
    const std::string file = dir + "/legacy.yaml";
    write_file(file, R"(domain: legacy
descriptors:
  - key: generic_key
    value: slow
    rate_limit:
      unit: day
      requests_per_unit: 2
    shadow_mode: false
  - key: generic_key
    value: free
    rate_limit: { unit: second, requests_per_unit: 1, unlimited: true }
  - key: generic_key
    value: weekly
    rate_limit: { unit: week, requests_per_unit: 3 }
  - key: client
    descriptors:
      - key: path
        rate_limit: { unit: hour, requests_per_unit: 1 }
)");
    rls_gateway g("  ratelimit_config_files: [ \"" + file + "\" ]\n");
    const auto slow = request("legacy", {{{{"generic_key", "slow"}}}});
    for (int i = 0; i < 2; ++i) {
        const auto r = g.ask(slow);
        CHECK(r.overall_code() == rls_response::OK);
        CHECK(r.statuses(0).current_limit().requests_per_unit() == 2);
        CHECK(r.statuses(0).current_limit().unit() == rls_response::RateLimit::DAY);
    }
    const auto over = g.ask(slow);
    CHECK(over.overall_code() == rls_response::OVER_LIMIT);
    CHECK(over.statuses(0).duration_until_reset().seconds() <= 86400);  // a fixed day, aligned to Unix time
    const auto weekly = g.ask(request("legacy", {{{{"generic_key", "weekly"}}}}));
    CHECK(weekly.statuses(0).current_limit().unit() == rls_response::RateLimit::WEEK);
    CHECK(weekly.statuses(0).limit_remaining() == 2);
    // unlimited: matched, never limited.
    for (int i = 0; i < 3; ++i)
        CHECK(g.ask(request("legacy", {{{{"generic_key", "free"}}}})).overall_code() == rls_response::OK);
    const auto nested = request("legacy", {{{{"client", "a"}, {"path", "/x"}}}});
    CHECK(g.ask(nested).overall_code() == rls_response::OK);
    CHECK(g.ask(nested).overall_code() == rls_response::OVER_LIMIT);
    CHECK(g.ask(request("legacy", {{{{"client", "b"}, {"path", "/x"}}}})).overall_code() == rls_response::OK);
    std::filesystem::remove_all(dir);
}

TEST_CASE("rls: a reload applies service.domains, and a tier that keeps its id keeps its counts") {
    rls_gateway g(api_domains);
    const auto roomy = request("api", {{{{"roomy", "r"}}}});
    CHECK(g.ask(roomy).statuses(0).limit_remaining() == 4);
    auto text = read_file(g.gw->config_path);
    const std::string from = "{ key: roomy, tiers: [ {limit: 5,", to = "{ key: roomy, tiers: [ {limit: 2,";
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    write_file(g.gw->config_path, text);
    g.gw->proc->signal(SIGHUP);
    const auto ask_only = request("api", {descriptor{{{"roomy", "r"}}, 0}});
    CHECK(eventually([&] { return g.ask(ask_only).statuses(0).current_limit().requests_per_unit() == 2; }));
    // One of the two counted before the reload: one more passes.
    CHECK(g.ask(roomy).overall_code() == rls_response::OK);
    CHECK(g.ask(roomy).overall_code() == rls_response::OVER_LIMIT);
}

namespace {

// `trial` and `audit` in shadow mode beside the enforced `tight`.
const std::string shadow_domains = R"(  domains:
    api:
      descriptors:
        - { key: tight, tiers: [ {limit: 1, per: 1m, algorithm: log} ] }
        - { key: roomy, tiers: [ {limit: 5, per: 1m, algorithm: log} ] }
        - { key: trial, shadow_mode: true, tiers: [ {limit: 2, per: 1m, algorithm: log} ] }
)";

double descriptors_total(const rls_gateway& g, const std::string& domain, const std::string& kind,
                         const std::string& result) {
    return metric_value(fetch(g.gw->admin_port, "GET", "/metrics").body, "sluice_rls_descriptors_total{domain=\"" +
                                                                             domain + "\",descriptor=\"" + kind +
                                                                             "\",result=\"" + result + "\"}");
}

// A shadow descriptor over its limit: OK, its status without a limit, no field for it, and
// counted shadow_limited; the same checks on any store and from either config format.
void shadow_over_its_limit(const rls_gateway& g, const std::string& domain,
                           const std::pair<std::string, std::string>& entry, const std::string& kind, int limit) {
    const auto one = request(domain, {{{entry}}});
    for (int i = 0; i < limit + 3; ++i) {
        const auto r = g.ask(one);
        CHECK(r.overall_code() == rls_response::OK);
        REQUIRE(r.statuses_size() == 1);
        CHECK(r.statuses(0).code() == rls_response::OK);
        CHECK(!r.statuses(0).has_current_limit());
        CHECK(r.response_headers_to_add_size() == 0);
    }
    CHECK(descriptors_total(g, domain, kind, "allowed") == limit);
    CHECK(descriptors_total(g, domain, kind, "shadow_limited") == 3);
    CHECK(descriptors_total(g, domain, kind, "limited") == 0);
}

// A call under way on the client's own threads; wait() for its status.
struct pending_call {
    pending_call(rls::RateLimitService::Stub& stub, const rls::RateLimitRequest& r, milliseconds deadline) {
        ctx.set_deadline(system_clock::now() + deadline);
        stub.async()->ShouldRateLimit(&ctx, &r, &out, [this](grpc::Status s) {
            std::lock_guard lock(mu);
            status = std::move(s);
            done = true;
            cv.notify_one();
        });
    }
    ~pending_call() { wait(30s); }  // gRPC holds ctx and out until the callback ran
    bool wait(milliseconds limit) {
        std::unique_lock lock(mu);
        return cv.wait_for(lock, limit, [&] { return done; });
    }
    grpc::ClientContext ctx;
    rls_response out;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
};

std::string redis_store(std::uint16_t port) {
    return "store:\n  type: redis\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(port) +
           "\"], timeout: 5s }\n";
}

// Redis runs no script (the gateway's checks) until resume_redis(). (WRITE: CLIENT UNPAUSE
// itself would wait out an ALL pause.)
void stall_redis(std::uint16_t port) {
    CHECK(run({"redis-cli", "-p", std::to_string(port), "CLIENT", "PAUSE", "10000", "WRITE"}, 10s).find("OK") !=
          std::string::npos);
}
void resume_redis(std::uint16_t port) {
    CHECK(run({"redis-cli", "-p", std::to_string(port), "CLIENT", "UNPAUSE"}, 10s).find("OK") != std::string::npos);
}

}  // namespace

TEST_CASE("rls: a shadow descriptor over its limit is OK, its refusals counted as shadow_limited (memory)") {
    rls_gateway g(shadow_domains);
    shadow_over_its_limit(g, "api", {"trial", "s"}, "descriptor:trial", 2);
    // Beside an enforced descriptor that admits: the call is OK, the enforced one's fields alone.
    const auto both = g.ask(request("api", {{{{"roomy", "r"}}}, {{{"trial", "s"}}}}));
    CHECK(both.overall_code() == rls_response::OK);
    REQUIRE(both.statuses_size() == 2);
    CHECK(both.statuses(0).current_limit().requests_per_unit() == 5);
    CHECK(both.statuses(1).code() == rls_response::OK);
    CHECK(!both.statuses(1).has_current_limit());
    CHECK(header(both, "RateLimit-Policy").find(";q=5;") != std::string::npos);
    CHECK(header(both, "RateLimit-Policy").find(";q=2;") == std::string::npos);
    CHECK(descriptors_total(g, "api", "descriptor:trial", "shadow_limited") == 4);
}

TEST_CASE("rls: a call an enforced descriptor refuses charges nothing on its shadow descriptors") {
    rls_gateway g(shadow_domains);
    const auto both = request("api", {{{{"tight", "t"}}}, {{{"trial", "u"}}}});
    CHECK(g.ask(both).overall_code() == rls_response::OK);  // tight 1/1, trial 1/2
    for (int i = 0; i < 3; ++i) {
        const auto r = g.ask(both);
        CHECK(r.overall_code() == rls_response::OVER_LIMIT);
        REQUIRE(r.statuses_size() == 2);
        CHECK(r.statuses(0).code() == rls_response::OVER_LIMIT);
        CHECK(r.statuses(1).code() == rls_response::OK);
    }
    // trial counted the first call only: one more passes, the next is shadow-limited.
    const auto trial = request("api", {{{{"trial", "u"}}}});
    g.ask(trial);
    CHECK(descriptors_total(g, "api", "descriptor:trial", "shadow_limited") == 0);
    g.ask(trial);
    CHECK(descriptors_total(g, "api", "descriptor:trial", "shadow_limited") == 1);
    CHECK(descriptors_total(g, "api", "descriptor:tight", "limited") == 3);
}

TEST_CASE("rls: shadow_mode: true of an envoyproxy/ratelimit file loads and behaves as service.domains' own") {
    const std::string dir = make_temp_dir();
    const std::string file = dir + "/legacy.yaml";
    // A day: its window, aligned to Unix time, does not turn over within the test (but at midnight UTC).
    write_file(file, R"(domain: legacy
descriptors:
  - key: generic_key
    value: trial
    shadow_mode: true
    rate_limit: { unit: day, requests_per_unit: 2 }
  - key: generic_key
    value: enforced
    rate_limit: { unit: day, requests_per_unit: 1 }
)");
    rls_gateway g("  ratelimit_config_files: [ \"" + file + "\" ]\n");
    shadow_over_its_limit(g, "legacy", {"generic_key", "trial"}, "descriptor:generic_key=trial", 2);
    const auto enforced = request("legacy", {{{{"generic_key", "enforced"}}}});
    CHECK(g.ask(enforced).overall_code() == rls_response::OK);
    CHECK(g.ask(enforced).overall_code() == rls_response::OVER_LIMIT);
    std::filesystem::remove_all(dir);
}

TEST_CASE("rls: GET /top lists the descriptors refused, by kind, value and domain, and not the shadow ones") {
    rls_gateway g(shadow_domains);
    const auto tight = request("api", {{{{"tight", "tenant/7"}}}});
    CHECK(g.ask(tight).overall_code() == rls_response::OK);
    for (int i = 0; i < 4; ++i) CHECK(g.ask(tight).overall_code() == rls_response::OVER_LIMIT);
    for (int i = 0; i < 4; ++i)
        CHECK(g.ask(request("api", {{{{"trial", "shadowed"}}}})).overall_code() == rls_response::OK);
    // A value past the label's bound is cut.
    const auto long_value = request("api", {{{{"tight", std::string(300, 'v')}}}});
    CHECK(g.ask(long_value).overall_code() == rls_response::OK);
    CHECK(g.ask(long_value).overall_code() == rls_response::OVER_LIMIT);

    const auto top = boost::json::parse(fetch(g.gw->admin_port, "GET", "/top").body).as_object();
    CHECK(top.at("limited_identities").to_number<int>() == 2);
    const auto& list = top.at("offenders").as_array();
    REQUIRE(list.size() == 2);
    const auto& first = list[0].as_object();
    CHECK(first.at("identity").as_string() == "tenant%2F7");
    CHECK(first.at("kind").as_string() == "descriptor:tight");
    CHECK(first.at("policy").as_string() == "api");
    CHECK(first.at("refusals").to_number<int>() == 4);
    const auto& second = list[1].as_object();
    CHECK(second.at("refusals").to_number<int>() == 1);
    CHECK(second.at("identity").as_string().size() < 100);
    CHECK(second.at("identity").as_string().starts_with(std::string(64, 'v')));
}

TEST_CASE(
    "rls: on Redis, a refused descriptor is answered from the deny cache, never past its limit, and "
    "shadow as on memory") {
    redis_server redis(unused_port());
    const std::string store =
        "store:\n  type: redis\n  on_error: deny\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(redis.port) +
        "\"], timeout: 2s }\n";
    rls_gateway g(shadow_domains, store);
    const auto roomy = request("api", {{{{"roomy", "cached"}}}});
    int admitted = 0;
    for (int i = 0; i < 20; ++i)
        if (g.ask(roomy).overall_code() == rls_response::OK) ++admitted;
    CHECK(admitted == 5);
    // Each worker (2) asks Redis once for the first denial, then answers from its cache.
    const auto hits =
        metric_value(fetch(g.gw->admin_port, "GET", "/metrics").body, "sluice_redis_deny_cache_hits_total");
    CHECK(hits >= 13);
    CHECK(hits <= 15);
    // A refusal from the cache is the same answer: OVER_LIMIT with the wait.
    const auto over = g.ask(roomy);
    CHECK(over.overall_code() == rls_response::OVER_LIMIT);
    CHECK(over.statuses(0).limit_remaining() == 0);
    CHECK(over.statuses(0).duration_until_reset().seconds() > 50);
    CHECK(!header(over, "Retry-After").empty());

    shadow_over_its_limit(g, "api", {"trial", "s"}, "descriptor:trial", 2);
}

TEST_CASE("rls: a call whose deadline passes while Redis decides is not charged: its admission is given back") {
    redis_server redis(unused_port());
    rls_gateway g(api_domains, redis_store(redis.port));
    CHECK(g.ask(request("api", {{{{"roomy", "warm"}}}})).overall_code() == rls_response::OK);  // the script is loaded
    const auto roomy = request("api", {{{{"roomy", "late"}}}});

    stall_redis(redis.port);
    rls_response out;
    const auto sent = steady_clock::now();
    const auto s = g.call(roomy, out, 200ms);
    CHECK(s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
    CHECK(steady_clock::now() - sent < 5s);  // the client's deadline, not Redis' stall, ended it
    resume_redis(redis.port);

    // Once Redis answers (the admission), the gateway gives it back and ends the call.
    const auto admin = g.gw->admin_port;
    CHECK(eventually_metric(admin, R"(sluice_rls_calls_total{code="deadline_exceeded"})", 1) == 1);
    const auto text = fetch(admin, "GET", "/metrics").body;
    CHECK(metric_value(text, R"(sluice_rls_taken_back_total{result="done"})") == 1);
    CHECK(metric_value(text, R"(sluice_rls_taken_back_total{result="failed"})") == 0);
    // A call its client cancels while Redis decides: CANCELLED, and given back too.
    const auto checks = [&] { return metric_value(fetch(admin, "GET", "/metrics").body, "sluice_redis_checks_total"); };
    const double before = checks();
    stall_redis(redis.port);
    {
        pending_call cancelled(*g.stub, roomy, 20s);
        CHECK(eventually([&] { return checks() >= before + 1; }));  // with Redis
        cancelled.ctx.TryCancel();
        REQUIRE(cancelled.wait(5s));
        CHECK(cancelled.status.error_code() == grpc::StatusCode::CANCELLED);
    }
    resume_redis(redis.port);
    CHECK(eventually_metric(admin, R"(sluice_rls_calls_total{code="cancelled"})", 1) == 1);
    CHECK(eventually_metric(admin, R"(sluice_rls_taken_back_total{result="done"})", 2) == 2);
    // Nothing of the late calls is left: exactly the full limit (5) passes.
    for (int i = 0; i < 5; ++i) {
        const auto r = g.ask(roomy);
        CHECK(r.overall_code() == rls_response::OK);
        CHECK(r.statuses(0).limit_remaining() == static_cast<std::uint32_t>(4 - i));
    }
    CHECK(g.ask(roomy).overall_code() == rls_response::OVER_LIMIT);
}

TEST_CASE("rls: over service.max_concurrent_calls a call is RESOURCE_EXHAUSTED at once, and so is a huge one") {
    redis_server redis(unused_port());
    rls_gateway g(api_domains + "  max_concurrent_calls: 2\n", redis_store(redis.port));
    CHECK(g.ask(request("api", {{{{"roomy", "warm"}}}})).overall_code() == rls_response::OK);
    const auto admin = g.gw->admin_port;
    const auto checks = [&] { return metric_value(fetch(admin, "GET", "/metrics").body, "sluice_redis_checks_total"); };
    const double before = checks();

    stall_redis(redis.port);
    const auto roomy = request("api", {{{{"roomy", "busy"}}}});
    pending_call first(*g.stub, roomy, 20s), second(*g.stub, roomy, 20s);
    // Both are with the store (sent to Redis, which holds them).
    CHECK(eventually([&] { return checks() >= before + 2; }));
    rls_response out;
    const auto sent = steady_clock::now();
    const auto s = g.call(roomy, out, 10s);
    CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    CHECK(steady_clock::now() - sent < 2s);  // at once, not after Redis
    CHECK_FALSE(first.wait(0ms));
    resume_redis(redis.port);

    REQUIRE(first.wait(15s));
    REQUIRE(second.wait(15s));
    CHECK(first.status.ok());
    CHECK(second.status.ok());
    CHECK(first.out.overall_code() == rls_response::OK);
    CHECK(second.out.overall_code() == rls_response::OK);
    CHECK(eventually_metric(admin, R"(sluice_rls_calls_total{code="resource_exhausted"})", 1) == 1);
    // The refused call counted nothing: 5 - 2 left.
    CHECK(g.ask(request("api", {descriptor{{{"roomy", "busy"}}, 0}})).statuses(0).limit_remaining() == 3);

    // gRPC itself refuses a call larger than 64 KiB.
    const auto huge = request("api", {{{{"roomy", std::string(70 * 1024, 'x')}}}});
    CHECK(g.call(huge, out).error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_CASE("rls: each call is one access log line: domain, descriptors' keys, matched path and hashed id, codes") {
    const auto dir = make_temp_dir();
    const std::string log_path = dir + "/access.log";
    rls_gateway g(api_domains, "", {{"log.access.path", "\"" + log_path + "\""}});
    const auto login = request("api", {{{{"path", "/login"}, {"remote_address", "10.9.9.9"}}}, {{{"nobody", "x"}}}});
    CHECK(g.ask(login).overall_code() == rls_response::OK);
    CHECK(g.ask(login).overall_code() == rls_response::OK);
    CHECK(g.ask(login).overall_code() == rls_response::OVER_LIMIT);
    rls_response out;
    CHECK(g.call(request("", {{{{"tight", "q\"\n"}}}}), out).error_code() == grpc::StatusCode::INVALID_ARGUMENT);

    std::vector<boost::json::object> lines;
    CHECK(eventually([&] {  // written by the access log's own thread, within about a second
        lines.clear();
        std::istringstream in(read_file(log_path));
        for (std::string line; std::getline(in, line);)
            if (!line.empty() && line.back() == '}') lines.push_back(boost::json::parse(line).as_object());
        return lines.size() >= 4;
    }));
    REQUIRE(lines.size() == 4);
    int over = 0, ok = 0, invalid = 0;
    std::string id;
    for (const auto& l : lines) {
        CHECK(l.at("rls").as_bool());
        CHECK(std::regex_match(std::string(l.at("peer").as_string()), std::regex(R"(ipv4:127\.0\.0\.1:\d+)")));
        CHECK(std::regex_match(std::string(l.at("time").as_string()),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
        CHECK(l.at("total_us").to_number<std::int64_t>() >= 0);
        const auto status = std::string(l.at("grpc_status").as_string());
        if (status == "INVALID_ARGUMENT") {
            ++invalid;
            CHECK(l.at("domain").as_string() == "");
            CHECK_FALSE(l.contains("code"));
            const auto& d = l.at("descriptors").as_array().at(0).as_object();
            CHECK(d.at("keys").as_array() == boost::json::array{"tight"});
            CHECK_FALSE(d.contains("id"));
            continue;
        }
        REQUIRE(status == "OK");
        CHECK(l.at("domain").as_string() == "api");
        CHECK(l.at("descriptor_count").to_number<int>() == 2);
        const auto& ds = l.at("descriptors").as_array();
        REQUIRE(ds.size() == 2);
        const auto& login_d = ds[0].as_object();
        CHECK(login_d.at("keys").as_array() == boost::json::array{"path", "remote_address"});
        CHECK(login_d.at("matched").as_string() == "descriptor:path=%2Flogin/remote_address");
        const auto this_id = std::string(login_d.at("id").as_string());
        CHECK(std::regex_match(this_id, std::regex("[0-9a-f]{32}")));
        if (id.empty()) id = this_id;
        CHECK(this_id == id);
        const auto& nobody = ds[1].as_object();
        CHECK(nobody.at("keys").as_array() == boost::json::array{"nobody"});
        CHECK_FALSE(nobody.contains("matched"));
        CHECK_FALSE(nobody.contains("id"));
        CHECK(nobody.at("code").as_string() == "OK");
        if (l.at("code").as_string() == "OVER_LIMIT") {
            ++over;
            CHECK(login_d.at("code").as_string() == "OVER_LIMIT");
        } else {
            ++ok;
            CHECK(l.at("code").as_string() == "OK");
            CHECK(login_d.at("code").as_string() == "OK");
        }
    }
    CHECK(ok == 2);
    CHECK(over == 1);
    CHECK(invalid == 1);
    CHECK(read_file(log_path).find("10.9.9.9") == std::string::npos);  // values are identifiers: hashed only
    std::filesystem::remove_all(dir);
}

namespace {

// tiers: plan: the descriptor's value is an API key of the registry; acme (two keys) is on
// pro, globex names no plan. Domain rls: api_key (identifiers of its own), shared_key (policy
// api's user identifier, which the gateway's route / limits too).
std::string plan_config(const std::string& dir, bool require_known, const std::string& default_plan) {
    write_file(dir + "/keys.yaml",
               "- { sha256: 744bebc72d973d7477c95aaa76043fc3c7cac21de46335ae24b862412b93a144, user: acme, plan: pro }\n"
               "- { sha256: 3e845533f90d500e6492856aa33dbc3f5893a399b177753cb310cbc21c652746, user: acme, plan: pro }\n"
               "- { sha256: 958a120c2df0fd2f9babe1b06ea3f39c5886326a181d9def6b01441172d7d136, user: globex }\n");
    return "clients:\n  user:\n    api_key_header: X-API-Key\n    api_keys: { file: \"" + dir +
           "/keys.yaml\", require_known: " + (require_known ? "true" : "false") + " }\n" +
           (default_plan.empty() ? "" : "    default_plan: " + default_plan + "\n") + R"(plans:
  free: { user: [ {limit: 2, per: 1m, algorithm: log} ] }
  pro:  { user: [ {limit: 4, per: 1m, algorithm: log} ] }
policies:
  api: { user: plan }
routes:
  - { match: { path_prefix: / }, policy: api }
)";
}

const std::string plan_domains = R"(  domains:
    rls:
      descriptors:
        - { key: api_key, tiers: plan }
        - { key: shared_key, tiers: plan, policy: api }
        - { key: tight, tiers: [ {limit: 1, per: 1m, algorithm: log} ] }
)";

rls::RateLimitRequest key_call(const std::string& key, const std::string& entry = "api_key") {
    return request("rls", {{{{entry, key}}}});
}

// How many calls in a row are OK (stops at `most`).
int calls_ok(const rls_gateway& g, const rls::RateLimitRequest& r, int most = 10) {
    for (int i = 0; i < most; ++i)
        if (g.ask(r).overall_code() != rls_response::OK) return i;
    return most;
}

}  // namespace

TEST_CASE("rls: tiers: plan limits an API key by its registry user's plan, unknown keys and no plan are OVER_LIMIT") {
    const auto dir = make_temp_dir();
    rls_gateway g(plan_domains, plan_config(dir, true, ""));

    // acme's two keys draw on one count of pro's 4.
    const auto first = g.ask(key_call("acme-key-one-0001"));
    REQUIRE(first.statuses_size() == 1);
    CHECK(first.statuses(0).code() == rls_response::OK);
    CHECK(first.statuses(0).current_limit().requests_per_unit() == 4);
    CHECK(first.statuses(0).current_limit().name() == "pro-descriptor:api_key-1m");
    CHECK(first.statuses(0).limit_remaining() == 3);
    CHECK(g.ask(key_call("acme-key-two-0002")).statuses(0).limit_remaining() == 2);
    CHECK(calls_ok(g, key_call("acme-key-one-0001")) == 2);
    const auto over = g.ask(key_call("acme-key-two-0002"));
    CHECK(over.overall_code() == rls_response::OVER_LIMIT);
    CHECK(over.statuses(0).current_limit().requests_per_unit() == 4);

    // An unknown key (require_known): OVER_LIMIT without a limit, and the call charges nothing.
    const auto unknown = g.ask(request("rls", {{{{"api_key", "stranger-key"}}}, {{{"tight", "t"}}}}));
    CHECK(unknown.overall_code() == rls_response::OVER_LIMIT);
    REQUIRE(unknown.statuses_size() == 2);
    CHECK(unknown.statuses(0).code() == rls_response::OVER_LIMIT);
    CHECK(!unknown.statuses(0).has_current_limit());
    CHECK(unknown.statuses(1).code() == rls_response::OK);
    CHECK(calls_ok(g, request("rls", {{{{"tight", "t"}}}})) == 1);          // tight's one call is still there
    CHECK(g.ask(key_call("")).overall_code() == rls_response::OVER_LIMIT);  // no key: required

    // globex names no plan and there is no default_plan: refused as the gateway's 403.
    const auto globex = g.ask(key_call("globex-key-0003"));
    CHECK(globex.overall_code() == rls_response::OVER_LIMIT);
    CHECK(!globex.statuses(0).has_current_limit());

    const auto text = fetch(g.gw->admin_port, "GET", "/metrics").body;
    const std::string d = R"(sluice_rls_descriptors_total{domain="rls",descriptor="descriptor:api_key",result=")";
    CHECK(metric_value(text, d + R"(allowed"})") == 4);
    CHECK(metric_value(text, d + R"(limited"})") == 2);  // calls_ok ends on one
    CHECK(metric_value(text, d + R"(unknown_key"})") == 2);
    CHECK(metric_value(text, d + R"(no_plan"})") == 1);
}

TEST_CASE("rls: tiers: plan without require_known: an unknown key is its own identity on default_plan") {
    const auto dir = make_temp_dir();
    rls_gateway g(plan_domains, plan_config(dir, false, "free"));
    CHECK(calls_ok(g, key_call("stranger-key-a")) == 2);     // free: 2
    CHECK(calls_ok(g, key_call("stranger-key-b")) == 2);     // another key, another count
    CHECK(calls_ok(g, key_call("globex-key-0003")) == 2);    // a known user without a plan: default_plan
    CHECK(calls_ok(g, key_call("acme-key-one-0001")) == 4);  // pro
}

namespace {

// `store`: the store section ("" for memory).
void one_user_quota(const std::string& store) {
    const auto dir = make_temp_dir();
    rls_gateway g(plan_domains, store + plan_config(dir, true, ""));
    const auto proxied = [&](const std::string& key) {
        return fetch(g.gw->port, "GET", "/", {{"X-API-Key", key}}).status;
    };
    CHECK(proxied("acme-key-one-0001") == 200);
    CHECK(proxied("acme-key-two-0002") == 200);
    const auto r = g.ask(key_call("acme-key-one-0001", "shared_key"));
    CHECK(r.overall_code() == rls_response::OK);
    CHECK(r.statuses(0).limit_remaining() == 1);  // pro's 4, two taken by the gateway
    CHECK(r.statuses(0).current_limit().name() == "pro-user-1m");
    CHECK(g.ask(key_call("acme-key-two-0002", "shared_key")).overall_code() == rls_response::OK);
    CHECK(proxied("acme-key-one-0001") == 429);
    CHECK(g.ask(key_call("acme-key-one-0001", "shared_key")).overall_code() == rls_response::OVER_LIMIT);
    // The descriptor identifier of its own (api_key) is another count.
    CHECK(g.ask(key_call("acme-key-one-0001")).overall_code() == rls_response::OK);
}

}  // namespace

TEST_CASE("rls: tiers: plan with policy: an Envoy call and a proxied request draw on one user quota (memory)") {
    one_user_quota("");
}

TEST_CASE("rls: tiers: plan with policy: an Envoy call and a proxied request draw on one user quota (Redis)") {
    redis_server redis(unused_port());
    one_user_quota(redis_store(redis.port));
}

TEST_CASE("rls: tiers: plan reads the registry in force: a reload that adds a key or moves a user applies") {
    const auto dir = make_temp_dir();
    rls_gateway g(plan_domains, plan_config(dir, true, ""));
    CHECK(g.ask(key_call("initech-key-0004")).overall_code() == rls_response::OVER_LIMIT);  // unknown
    CHECK(calls_ok(g, key_call("acme-key-one-0001")) == 4);                                 // pro
    // initech joins on pro, acme moves to free (whose counts start at zero).
    write_file(
        dir + "/keys.yaml",
        "- { sha256: 744bebc72d973d7477c95aaa76043fc3c7cac21de46335ae24b862412b93a144, user: acme, plan: free }\n"
        "- { sha256: dea5b0c18b4aa52ffa932c2c8db93fc457afa52312448b170969f43cd064d6a9, user: initech, plan: "
        "pro }\n");
    REQUIRE(fetch(g.gw->admin_port, "POST", "/reload").status == 200);
    CHECK(calls_ok(g, key_call("initech-key-0004")) == 4);
    const auto acme = g.ask(key_call("acme-key-one-0001"));
    CHECK(acme.overall_code() == rls_response::OK);
    CHECK(acme.statuses(0).current_limit().requests_per_unit() == 2);
    CHECK(calls_ok(g, key_call("acme-key-one-0001")) == 1);
    // acme's second key left the registry.
    CHECK(g.ask(key_call("acme-key-two-0002")).overall_code() == rls_response::OVER_LIMIT);
}

// Review of issue 26 (branch i26-review): cases that show an inexactness. Expected to FAIL on
// main 6a7d190; each says what it proves.

TEST_CASE("rls review: a shadow descriptor is counted even when another shadow descriptor of the call is over") {
    // Two shadow nodes: `first` limit 1, `second` limit 3. "Its tiers are counted as any
    // other's": `second` must count every call, whatever `first` says.
    rls_gateway g(R"(  domains:
    api:
      descriptors:
        - { key: first, shadow_mode: true, tiers: [ {limit: 1, per: 1m, algorithm: log} ] }
        - { key: second, shadow_mode: true, tiers: [ {limit: 3, per: 1m, algorithm: log} ] }
)");
    const auto both = request("api", {{{{"first", "a"}}}, {{{"second", "b"}}}});
    for (int i = 0; i < 3; ++i) CHECK(g.ask(both).overall_code() == rls_response::OK);
    CHECK(descriptors_total(g, "api", "descriptor:first", "shadow_limited") == 2);
    // `second` has seen 3 calls (its limit): one more alone is over it.
    g.ask(request("api", {{{{"second", "b"}}}}));
    CHECK(descriptors_total(g, "api", "descriptor:second", "shadow_limited") == 1);
}

TEST_CASE("rls review: a call refused by a queried descriptor (hits_addend 0) consumes nothing on a counted one") {
    rls_gateway g(api_domains);
    // roomy "q" counted 3 times, then its limit lowered to 2 by a reload (its tier keeps its id
    // and its counts): a query on it is refused.
    const auto roomy = request("api", {{{{"roomy", "q"}}}});
    for (int i = 0; i < 3; ++i) REQUIRE(g.ask(roomy).overall_code() == rls_response::OK);
    auto text = read_file(g.gw->config_path);
    const std::string from = "{ key: roomy, tiers: [ {limit: 5,", to = "{ key: roomy, tiers: [ {limit: 2,";
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    write_file(g.gw->config_path, text);
    g.gw->proc->signal(SIGHUP);
    const auto ask_only = request("api", {descriptor{{{"roomy", "q"}}, 0}});
    // Every worker has the new snapshot (calls go to the workers in turn): several in a row say 2.
    REQUIRE(eventually([&] {
        for (int i = 0; i < 8; ++i)
            if (g.ask(ask_only).statuses(0).current_limit().requests_per_unit() != 2) return false;
        return true;
    }));
    // tight "t" (limit 1, counted) with roomy "q" queried: refused by the query...
    const auto r = g.ask(request("api", {descriptor{{{"tight", "t"}}}, descriptor{{{"roomy", "q"}}, 0}}));
    REQUIRE(r.overall_code() == rls_response::OVER_LIMIT);
    CHECK(r.statuses(1).code() == rls_response::OVER_LIMIT);
    // ...so tight "t" must not have been charged: its one call still passes.
    CHECK(g.ask(request("api", {{{{"tight", "t"}}}})).overall_code() == rls_response::OK);
}

TEST_CASE("rls review: an envoyproxy/ratelimit wildcard value (\"/api/*\") limits as that service does") {
    // envoyproxy/ratelimit (src/config/config_impl.go) matches a value ending in '*' as a
    // prefix, each value counted on its own. Loaded "unchanged", it must not leave the path unlimited.
    const std::string dir = make_temp_dir();
    const std::string file = dir + "/wild.yaml";
    write_file(file, R"(domain: wild
descriptors:
  - key: path
    value: "/api/*"
    rate_limit: { unit: hour, requests_per_unit: 1 }
)");
    rls_gateway g("  ratelimit_config_files: [ \"" + file + "\" ]\n");
    const auto users = request("wild", {{{{"path", "/api/users"}}}});
    CHECK(g.ask(users).overall_code() == rls_response::OK);
    CHECK(g.ask(users).overall_code() == rls_response::OVER_LIMIT);
    // Each value counted on its own; a value outside the prefix is not limited.
    CHECK(g.ask(request("wild", {{{{"path", "/api/orders"}}}})).overall_code() == rls_response::OK);
    for (int i = 0; i < 2; ++i)
        CHECK(g.ask(request("wild", {{{{"path", "/web"}}}})).overall_code() == rls_response::OK);
    std::filesystem::remove_all(dir);
}

TEST_CASE("rls review: a cost above every limit is OVER_LIMIT, not an error Envoy lets through") {
    // Envoy's filter answers a failed call by failure_mode_deny (false in the documented
    // config: the request passes, uncounted). A cost no tier can ever admit is a refusal.
    rls_gateway g(api_domains);
    rls_response out;
    const auto s = g.call(request("api", {descriptor{{{"roomy", "big"}}, 2'000'000'000ULL}}), out);
    CHECK_MESSAGE(s.ok(), s.error_message());
    CHECK(out.overall_code() == rls_response::OVER_LIMIT);
}

TEST_CASE("rls review: a reload while a call is with the store, access log on: the call's line is written safely") {
    // log_call (finish) reads st.check.node(i)->kind after decide()'s frame, the only holder of
    // the call's snapshot once a reload replaced it, is gone: a use after free that
    // AddressSanitizer reports (run with SLUICE_TEST_GATEWAY_BIN=<an SLUICE_SANITIZE build>).
    redis_server redis(unused_port());
    const auto dir = make_temp_dir();
    const std::string log_path = dir + "/access.log";
    rls_gateway g(api_domains, redis_store(redis.port), {{"log.access.path", "\"" + log_path + "\""}});
    CHECK(g.ask(request("api", {{{{"roomy", "warm"}}}})).overall_code() == rls_response::OK);
    const auto admin = g.gw->admin_port;
    const auto checks = [&] { return metric_value(fetch(admin, "GET", "/metrics").body, "sluice_redis_checks_total"); };
    const double before = checks();
    stall_redis(redis.port);
    pending_call late(*g.stub, request("api", {{{{"roomy", "late"}}}}), 20s);
    CHECK(eventually([&] { return checks() >= before + 1; }));  // with Redis
    auto text = read_file(g.gw->config_path);
    const std::string from = "{ key: roomy, tiers: [ {limit: 5,", to = "{ key: roomy, tiers: [ {limit: 4,";
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    text.replace(at, from.size(), to);
    write_file(g.gw->config_path, text);
    g.gw->proc->signal(SIGHUP);
    CHECK(eventually_metric(admin, R"(sluice_config_reloads_total{result="ok"})", 1) == 1);
    // Every worker has the new snapshot once a call answers with its limit (each worker in turn).
    resume_redis(redis.port);
    REQUIRE(late.wait(15s));
    CHECK(late.status.ok());
    for (int i = 0; i < 4; ++i)
        CHECK(
            g.ask(request("api", {descriptor{{{"roomy", "q"}}, 0}})).statuses(0).current_limit().requests_per_unit() ==
            4);
    CHECK(eventually([&] { return read_file(log_path).find("descriptor:roomy") != std::string::npos; }));
    CHECK(g.gw->proc->running());
    std::filesystem::remove_all(dir);
}

TEST_CASE("rls review: a cost reported after the response that does not fit what is left counts nothing (documented)") {
    // Envoy Gateway's response cost / Envoy AI Gateway's token limits: the request path asks
    // with hits_addend 0 (may it pass?), and once the response is done Envoy reports its real
    // cost in a second call whose answer nobody enforces (fire-and-forget). A report refused
    // because it exceeds what is left counts nothing, so the budget is never spent beyond the
    // remainder: a known limitation (docs/configuration.md, Costs), pinned here so that a
    // change to it is seen. (The reviewer expected 2: a report counted past the limit.)
    rls_gateway g(api_domains);  // roomy: 5 per minute
    const auto may_pass = request("api", {descriptor{{{"roomy", "tokens"}}, 0}});
    const auto report = request("api", {descriptor{{{"roomy", "tokens"}}, 4}});
    int passed = 0, reports_refused = 0;
    for (int i = 0; i < 10; ++i) {
        if (g.ask(may_pass).overall_code() != rls_response::OK) break;
        ++passed;
        if (g.ask(report).overall_code() == rls_response::OVER_LIMIT) ++reports_refused;  // 4 tokens used
    }
    // The first report fits (4 of 5); every later one (4 over the 1 left) is refused and counts
    // nothing, so the 1 left keeps admitting.
    CHECK(passed == 10);
    CHECK(reports_refused == 9);
}
