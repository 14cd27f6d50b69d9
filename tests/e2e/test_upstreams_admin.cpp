// The operator's view of upstream pools: GET /upstreams and the sluice_upstream_* families
// per pool and server, through the real gateway, two real test upstreams and an address
// nothing listens on.
#include "e2e.hpp"

#include <boost/json/serialize.hpp>

#include <map>

using namespace sluice::test;

namespace {

std::string addr(std::uint16_t port) { return "127.0.0.1:" + std::to_string(port); }

// The pool `api` of up to three servers (weight 2, 1, 1), passive ejection at the first
// failure for a minute, one retry elsewhere; every other request goes to `default`.
std::string pool_yaml(const std::vector<std::pair<std::uint16_t, unsigned>>& servers) {
    std::string out = "upstreams:\n  api:\n    servers:\n";
    for (const auto& [port, weight] : servers)
        out += "      - { url: \"http://" + addr(port) + "\", weight: " + std::to_string(weight) + " }\n";
    out +=
        "    health:\n      passive: { eject_after: 1, eject_for: 60s }\n    retries: 1\n"
        "routes:\n  - { match: { path_prefix: /api/ }, policy: none, upstream: api }\n"
        "  - { match: { path_prefix: / }, policy: none }\n";
    return out;
}

boost::json::object upstreams_json(const gateway& gw) {
    const auto r = fetch(gw.admin_port, "GET", "/upstreams");
    REQUIRE(r.status == 200);
    CHECK(r.header("Content-Type") == "application/json");
    return json_of(r);
}

// The pool `name` of a GET /upstreams answer.
boost::json::object pool_of(const boost::json::object& all, const std::string& name) {
    for (const auto& p : all.at("upstreams").as_array())
        if (p.as_object().at("name").as_string() == name) return p.as_object();
    FAIL("no pool " << name << " in " << boost::json::serialize(all));
    return {};
}

// Its servers by address.
std::map<std::string, boost::json::object> servers_of(const boost::json::object& pool) {
    std::map<std::string, boost::json::object> out;
    for (const auto& s : pool.at("servers").as_array())
        out[std::string(s.as_object().at("address").as_string())] = s.as_object();
    return out;
}

std::int64_t num(const boost::json::object& o, const char* key) { return o.at(key).as_int64(); }

std::string server_sample(const std::string& family, std::uint16_t port, const std::string& more = "") {
    return family + R"({upstream="api",server=")" + addr(port) + "\"" + more + "}";
}

}  // namespace

TEST_CASE("GET /upstreams and the upstream metrics: servers, counts, ejection, a reload that removes one") {
    auto up1 = start_upstream();
    auto up2 = start_upstream();
    const auto dead = unused_port();
    auto gw = start_gateway(gateway_yaml(up1->port, {}, pool_yaml({{up1->port, 2}, {up2->port, 1}, {dead, 1}})));

    // Before any request: three servers, as configured, all up, nothing counted.
    {
        const auto api = pool_of(upstreams_json(*gw), "api");
        CHECK(api.at("balance").as_string() == "round_robin");
        CHECK(num(api, "max_in_flight") == 0);
        auto servers = servers_of(api);
        REQUIRE(servers.size() == 3);
        for (const auto& [port, weight] : {std::pair{up1->port, 2}, {up2->port, 1}, {dead, 1}}) {
            const auto& s = servers.at(addr(port));
            CHECK(s.at("url").as_string() == "http://" + addr(port));
            CHECK(num(s, "weight") == weight);
            CHECK(s.at("state").as_string() == "up");
            CHECK(num(s, "requests") == 0);
            CHECK(num(s, "in_flight") == 0);
            CHECK(s.at("last_check").is_null());
        }
        CHECK(pool_of(upstreams_json(*gw), "default").at("servers").as_array().size() == 1);
    }

    // The dead server refuses its first attempt, is ejected at once (eject_after 1), and
    // that request is retried on another server: every client request succeeds.
    constexpr int sent = 20;
    for (int i = 0; i < sent; ++i) REQUIRE(fetch(gw->port, "GET", "/api/ok").status == 200);

    // In flight drops back to 0 a moment after the client has its answer.
    boost::json::object api;
    const bool settled = eventually([&] {
        api = pool_of(upstreams_json(*gw), "api");
        for (const auto& s : api.at("servers").as_array())
            if (num(s.as_object(), "in_flight") != 0) return false;
        return true;
    });
    CHECK(settled);
    auto servers = servers_of(api);
    REQUIRE(servers.size() == 3);
    const auto& s1 = servers.at(addr(up1->port));
    const auto& s2 = servers.at(addr(up2->port));
    const auto& sd = servers.at(addr(dead));
    // Every request reached a live server once; the dead one had one attempt, the retried one.
    CHECK(num(s1, "requests") + num(s2, "requests") == sent);
    CHECK(num(s1, "requests") > 0);
    CHECK(num(s2, "requests") > 0);
    CHECK(num(sd, "requests") == 1);
    CHECK(num(sd, "failures") == 1);
    CHECK(num(s1, "failures") == 0);
    CHECK(sd.at("state").as_string() == "ejected");
    CHECK(num(sd, "ejections") == 1);
    CHECK(num(sd, "ejected_for_ms") > 0);
    CHECK(num(sd, "ejected_for_ms") <= 60'000);
    CHECK(s1.at("state").as_string() == "up");
    CHECK(num(s1, "ejections") == 0);
    CHECK(num(api, "retries") == 1);
    CHECK(num(api, "retry_budget_exhausted") == 0);
    const auto s1_requests = num(s1, "requests"), s2_requests = num(s2, "requests");

    // The metrics say the same, per pool and server.
    const auto m = fetch(gw->admin_port, "GET", "/metrics").body;
    CHECK(metric_value(m, server_sample("sluice_upstream_requests_total", up1->port)) == s1_requests);
    CHECK(metric_value(m, server_sample("sluice_upstream_requests_total", up2->port)) == s2_requests);
    CHECK(metric_value(m, server_sample("sluice_upstream_requests_total", dead)) == 1);
    CHECK(metric_value(m, server_sample("sluice_upstream_server_errors_total", dead, R"(,kind="connect_refused")")) ==
          1);
    CHECK(metric_value(m, server_sample("sluice_upstream_server_errors_total", up1->port, R"(,kind="5xx")")) == 0);
    CHECK(metric_value(m, server_sample("sluice_upstream_server_up", dead)) == 0);
    CHECK(metric_value(m, server_sample("sluice_upstream_server_up", up1->port)) == 1);
    CHECK(metric_value(m, server_sample("sluice_upstream_server_up", up2->port)) == 1);
    CHECK(metric_value(m, server_sample("sluice_upstream_ejections_total", dead)) == 1);
    CHECK(metric_value(m, server_sample("sluice_upstream_ejections_total", up2->port)) == 0);
    CHECK(metric_value(m, server_sample("sluice_upstream_in_flight", up1->port)) == 0);
    CHECK(metric_value(m, R"(sluice_upstream_retries_total{upstream="api"})") == 1);
    CHECK(metric_value(m, R"(sluice_upstream_retry_budget_exhausted_total{upstream="api"})") == 0);
    CHECK(metric_value(m, R"(sluice_upstream_response_seconds_count{upstream="api"})") == sent);
    CHECK(metric_value(m, R"(sluice_upstream_response_seconds_bucket{upstream="api",le="+Inf"})") == sent);
    CHECK(metric_value(m, R"(sluice_upstream_response_seconds_count{upstream="default"})") == 0);
    // The gateway-wide family is unchanged.
    CHECK(metric_value(m, R"(sluice_upstream_errors_total{kind="connect_refused"})") == 1);
    // The ejection was logged once.
    CHECK(eventually([&] {
        return gw->proc->output().find("upstream api: server " + addr(dead) + " ejected after 1 failures in a row") !=
               std::string::npos;
    }));

    // Anything but GET or HEAD: 405, JSON.
    const auto post = fetch(gw->admin_port, "POST", "/upstreams");
    CHECK(post.status == 405);
    CHECK(post.header("Allow") == "GET, HEAD");
    CHECK(json_of(post).at("error").as_string() == "method_not_allowed");

    // A reload that removes up2: /upstreams follows; the servers that stay keep their
    // counts and health, and so does the pool.
    write_file(gw->config_path, gateway_yaml(up1->port, {}, pool_yaml({{up1->port, 2}, {dead, 1}})));
    REQUIRE(fetch(gw->admin_port, "POST", "/reload").status == 200);
    api = pool_of(upstreams_json(*gw), "api");
    servers = servers_of(api);
    REQUIRE(servers.size() == 2);
    CHECK(servers.count(addr(up2->port)) == 0);
    CHECK(num(servers.at(addr(up1->port)), "requests") == s1_requests);
    CHECK(servers.at(addr(dead)).at("state").as_string() == "ejected");
    CHECK(num(servers.at(addr(dead)), "ejections") == 1);
    CHECK(num(api, "retries") == 1);

    constexpr int more = 5;
    for (int i = 0; i < more; ++i) REQUIRE(fetch(gw->port, "GET", "/api/ok").status == 200);
    servers = servers_of(pool_of(upstreams_json(*gw), "api"));
    CHECK(num(servers.at(addr(up1->port)), "requests") == s1_requests + more);
    CHECK(num(servers.at(addr(dead)), "requests") == 1);
    const auto after = fetch(gw->admin_port, "GET", "/metrics").body;
    CHECK(after.find(R"(server=")" + addr(up2->port)) == std::string::npos);
    CHECK(metric_value(after, server_sample("sluice_upstream_requests_total", up1->port)) == s1_requests + more);
    CHECK(metric_value(after, R"(sluice_upstream_response_seconds_count{upstream="api"})") == sent + more);
}

TEST_CASE("GET /upstreams: a 5xx counts as a failure and an error of kind 5xx") {
    auto up = start_upstream();
    auto gw = start_gateway(gateway_yaml(up->port, {{"upstream.health.passive.eject_after", "0"}}));
    for (int i = 0; i < 3; ++i) CHECK(fetch(gw->port, "GET", "/status?code=503").status == 503);
    CHECK(fetch(gw->port, "GET", "/ok").status == 200);
    const auto servers = servers_of(pool_of(upstreams_json(*gw), "default"));
    const auto& s = servers.at(addr(up->port));
    CHECK(num(s, "requests") == 4);
    CHECK(num(s, "failures") == 3);
    CHECK(s.at("state").as_string() == "up");  // eject_after 0: never ejected
    CHECK(num(s, "ejections") == 0);
    const auto m = fetch(gw->admin_port, "GET", "/metrics").body;
    const std::string at = R"({upstream="default",server=")" + addr(up->port) + "\"";
    CHECK(metric_value(m, "sluice_upstream_server_errors_total" + at + R"(,kind="5xx"})") == 3);
    CHECK(metric_value(m, "sluice_upstream_requests_total" + at + "}") == 4);
    CHECK(metric_value(m, "sluice_upstream_server_up" + at + "}") == 1);
}

TEST_CASE("GET /upstreams: the last active check, and a server the checks took down") {
    auto up1 = start_upstream();
    auto up2 = start_upstream();
    auto gw = start_gateway(
        "server: { listen: \"127.0.0.1:0\", threads: 2 }\nadmin: { listen: \"127.0.0.1:0\" }\nlog: { level: info }\n"
        "upstream:\n  servers: [\"http://" +
        addr(up1->port) + "\", \"http://" + addr(up2->port) +
        "\"]\n"
        "  health: { path: /healthz, interval: 100ms, timeout: 90ms, healthy: 1, unhealthy: 2 }\n");

    // A check has run on both: last_check says ok, with its time.
    std::map<std::string, boost::json::object> servers;
    const bool checked = eventually([&] {
        servers = servers_of(pool_of(upstreams_json(*gw), "default"));
        for (const auto& [a, s] : servers)
            if (s.at("last_check").is_null()) return false;
        return true;
    });
    REQUIRE(checked);
    for (const auto& [a, s] : servers) {
        const auto& check = s.at("last_check").as_object();
        CHECK(check.at("result").as_string() == "ok");
        CHECK(check.at("at_ms").as_int64() > 1'600'000'000'000);
        CHECK(check.at("failures_in_row").as_int64() == 0);
        CHECK(s.at("state").as_string() == "up");
    }

    // up2's /healthz answers 503: down after two failed checks, in /upstreams and the metrics.
    REQUIRE(fetch(up2->port, "GET", "/control?health=503").status == 200);
    boost::json::object down;
    const bool went = eventually([&] {
        down = servers_of(pool_of(upstreams_json(*gw), "default")).at(addr(up2->port));
        return down.at("state").as_string() == "down";
    });
    REQUIRE(went);
    const auto& check = down.at("last_check").as_object();
    CHECK(check.at("result").as_string().find("503") != boost::json::string::npos);
    CHECK(check.at("failures_in_row").as_int64() >= 2);
    CHECK(check.at("passes_in_row").as_int64() == 0);
    const auto m = fetch(gw->admin_port, "GET", "/metrics").body;
    const std::string at = R"({upstream="default",server=")";
    CHECK(metric_value(m, "sluice_upstream_server_up" + at + addr(up2->port) + "\"}") == 0);
    CHECK(metric_value(m, "sluice_upstream_server_up" + at + addr(up1->port) + "\"}") == 1);
    CHECK(metric_value(m, "sluice_upstream_ejections_total" + at + addr(up2->port) + "\"}") == 0);

    // Back after one pass.
    REQUIRE(fetch(up2->port, "GET", "/control?health=0").status == 200);
    CHECK(eventually([&] {
        const auto s = servers_of(pool_of(upstreams_json(*gw), "default")).at(addr(up2->port));
        return s.at("state").as_string() == "up" && s.at("last_check").as_object().at("result").as_string() == "ok";
    }));
}
