// Plans (plans.<name>.user, a policy's `user: plan`), through the real gateway binary on
// the memory store and on Redis: the plan comes from the key registry, a JWT claim or
// clients.user.default_plan.
#include "e2e.hpp"

#include <boost/json/parse.hpp>

using namespace sluice::test;

namespace {

const std::string secret = "e2e-plan-secret";

std::string token(const std::string& sub, const std::string& plan) {
    std::vector<std::pair<std::string, std::string>> claims;
    if (!plan.empty()) claims.emplace_back("tier", plan);
    return "Bearer " + hs256_token(secret, sub, 600, claims);
}

// acme (two keys) is on pro; globex names no plan.
std::string registry(const std::string& acme_plan) {
    return "- { sha256: 744bebc72d973d7477c95aaa76043fc3c7cac21de46335ae24b862412b93a144, user: acme, plan: " +
           acme_plan +
           " }\n"
           "- { sha256: 3e845533f90d500e6492856aa33dbc3f5893a399b177753cb310cbc21c652746, user: acme, plan: " +
           acme_plan +
           " }\n"
           "- { sha256: 958a120c2df0fd2f9babe1b06ea3f39c5886326a181d9def6b01441172d7d136, user: globex }\n";
}

std::string plans_yaml(const std::string& keys_file, const std::string& store) {
    return store + R"(
clients:
  user:
    api_key_header: X-API-Key
    api_keys: { file: ")" +
           keys_file + R"(" }
    jwt: { algorithms: [HS256], secret_env: SLUICE_E2E_JWT, plan_claim: tier }
    default_plan: free
plans:
  free: { user: [ {limit: 2, per: 1d, algorithm: fixed} ] }
  pro:  { user: [ {limit: 4, per: 1d, algorithm: fixed} ] }
policies:
  api:
    ip: [ {limit: 1000, per: 1h, precision: 6m} ]
    user: plan
routes:
  - { match: { path_prefix: / }, policy: api }
)";
}

struct plan_fixture {
    explicit plan_fixture(const std::string& store) {
        dir = make_temp_dir();
        keys = dir + "/keys.yaml";
        write_file(keys, registry("pro"));
        up = start_upstream();
        gw = start_gateway(gateway_yaml(up->port, {}, plans_yaml(keys, store)), {}, {{"SLUICE_E2E_JWT", secret}});
        REQUIRE(eventually([&] { return fetch(gw->admin_port, "GET", "/readyz").status == 200; }));
    }
    response get(header_list h) const { return fetch(gw->port, "GET", "/", std::move(h)); }
    // How many requests in a row are admitted (stops at `most`), and the last answer.
    int admitted(const header_list& h, int most = 10) const {
        for (int i = 0; i < most; ++i)
            if (get(h).status != 200) return i;
        return most;
    }
    std::string dir, keys;
    std::unique_ptr<upstream_server> up;
    std::unique_ptr<gateway> gw;
};

void check_plans(plan_fixture& f) {
    const header_list acme_one{{"X-API-Key", "acme-key-one-0001"}}, acme_two{{"X-API-Key", "acme-key-two-0002"}};

    // The registry's plan: acme on pro (4 a day), over both of its keys.
    auto first = f.get(acme_one);
    CHECK(first.status == 200);
    CHECK(first.header("RateLimit-Policy").find("\"pro-user-24h\";q=4;w=86400") != std::string::npos);
    CHECK(f.admitted(acme_two) == 3);
    auto over = f.get(acme_one);
    CHECK(over.status == 429);
    CHECK(over.header("RateLimit").find("\"pro-user-24h\";r=0") != std::string::npos);

    // No plan in the registry: default_plan (free, 2 a day); an unknown key likewise.
    CHECK(f.admitted({{"X-API-Key", "globex-key-0003"}}) == 2);
    CHECK(f.get({{"X-API-Key", "globex-key-0003"}}).header("RateLimit-Policy").find("free-user-24h") !=
          std::string::npos);
    CHECK(f.admitted({{"X-API-Key", "someone-unregistered"}}) == 2);

    // A JWT's plan claim; without one, default_plan; a plan not configured is a 403.
    CHECK(f.admitted({{"Authorization", token("alice", "pro")}}) == 4);
    CHECK(f.admitted({{"Authorization", token("bob", "")}}) == 2);
    auto gold = f.get({{"Authorization", token("carol", "gold")}});
    CHECK(gold.status == 403);
    auto body = boost::json::parse(gold.body);
    CHECK(body.at("error").as_string() == "forbidden");
    CHECK(body.at("message").as_string() == "unknown plan");
    CHECK(metric_value(fetch(f.gw->admin_port, "GET", "/metrics").body, "sluice_forbidden_total") == 1);

    // acme moves to free: free's counts start at zero; back on pro, pro's are where they were.
    write_file(f.keys, registry("free"));
    REQUIRE(fetch(f.gw->admin_port, "POST", "/reload").status == 200);
    CHECK(f.admitted(acme_one) == 2);
    auto on_free = f.get(acme_two);
    CHECK(on_free.status == 429);
    CHECK(on_free.header("RateLimit-Policy").find("free-user-24h") != std::string::npos);
    write_file(f.keys, registry("pro"));
    REQUIRE(fetch(f.gw->admin_port, "POST", "/reload").status == 200);
    CHECK(f.get(acme_one).status == 429);

    // A registry naming a plan the config does not have is refused at its line.
    write_file(f.keys, registry("gold"));
    auto bad = fetch(f.gw->admin_port, "POST", "/reload");
    CHECK(bad.status == 422);
    CHECK(bad.body.find("keys.yaml:1:97: [0].plan: no plan named \\\"gold\\\"") != std::string::npos);
}

}  // namespace

TEST_CASE("plans: the registry, a JWT claim or default_plan picks the caller's tiers (memory store)") {
    plan_fixture f("");
    check_plans(f);
}

TEST_CASE("plans: the same on the Redis store") {
    redis_server redis(unused_port());
    plan_fixture f("store:\n  type: redis\n  redis: { nodes: [\"127.0.0.1:" + std::to_string(redis.port) +
                   "\"], timeout: 2s }");
    check_plans(f);
}
