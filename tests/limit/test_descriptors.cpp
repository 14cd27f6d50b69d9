// Rate-limit descriptors (limit/descriptors.hpp): service.domains compiled, descriptors
// matched down a domain's tree, and one call's descriptors made into store requests.
#include "limit/descriptors.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace limit = sluice::limit;
namespace config = sluice::config;
namespace identity = sluice::identity;

const char* yaml = R"(
upstream: { url: "http://127.0.0.1:3000" }
service:
  domains:
    api:
      descriptors:
        - { key: remote_address, tiers: [ {limit: 10, per: 1s} ] }
        - key: path
          value: /login
          descriptors: [ { key: remote_address, tiers: [ {limit: 5, per: 1m, algorithm: log} ] } ]
        - key: path
          descriptors: [ { key: remote_address, tiers: [ {limit: 50, per: 1m} ] } ]
)";

struct compiled {
    compiled()
        : cfg(config::load_string(yaml, "test.yaml")),
          domains(limit::compile_domains(*cfg, limit::compile_policies(*cfg))) {}
    std::shared_ptr<const config::config> cfg;
    std::vector<limit::descriptor_domain> domains;
};

}  // namespace

TEST_CASE("descriptors: an entry takes the node of its key and value, else of its key alone") {
    compiled c;
    const auto* api = limit::find_domain(c.domains, "api");
    REQUIRE(api != nullptr);
    CHECK(limit::find_domain(c.domains, "other") == nullptr);

    const std::vector<limit::descriptor_entry> login{{"path", "/login"}, {"remote_address", "10.0.0.1"}};
    const auto* n = limit::match(*api, login);
    REQUIRE(n != nullptr);
    REQUIRE(n->tiers.size() == 1);
    CHECK(n->tiers[0].limit == 5);
    CHECK(std::string(identity::to_string(n->kind)) == "descriptor:path=%2Flogin/remote_address");
    CHECK(n->tiers[0].id == "api/descriptor:path=%2Flogin/remote_address/log/1m/1m");

    const std::vector<limit::descriptor_entry> other{{"path", "/other"}, {"remote_address", "10.0.0.1"}};
    n = limit::match(*api, other);
    REQUIRE(n != nullptr);
    CHECK(n->tiers[0].limit == 50);
    CHECK(std::string(identity::to_string(n->kind)) == "descriptor:path/remote_address");

    // A path node has no tiers of its own; an unknown key, or an entry past the tree, matches none.
    const std::vector<limit::descriptor_entry> path_only{{"path", "/login"}};
    CHECK(limit::match(*api, path_only)->tiers.empty());
    const std::vector<limit::descriptor_entry> unknown{{"user", "x"}};
    CHECK(limit::match(*api, unknown) == nullptr);
    const std::vector<limit::descriptor_entry> deeper{{"remote_address", "10.0.0.1"}, {"path", "/"}};
    CHECK(limit::match(*api, deeper) == nullptr);
}

TEST_CASE("descriptors: one call is one request, and the same identifier twice is one key") {
    compiled c;
    const auto* api = limit::find_domain(c.domains, "api");
    const identity::hasher h("secret");
    const std::vector<limit::descriptor_entry> a{{"remote_address", "10.0.0.1"}}, b{{"remote_address", "10.0.0.2"}};
    const std::vector<limit::descriptor_entry> none{{"user", "x"}};
    const std::vector<limit::descriptor_ask> asks{{a, 2}, {none, 2}, {b, 2}, {a, 2}};
    limit::descriptor_check check;
    REQUIRE(check.prepare(h, api, asks) == "");
    CHECK(check.charged().keys.size() == 2);
    CHECK(check.charged().cost == 2);
    CHECK(check.queried().keys.empty());
    const auto slots = check.slots();
    REQUIRE(slots.size() == 4);
    CHECK(slots[0].in == limit::descriptor_check::part::charged);
    CHECK(slots[1].in == limit::descriptor_check::part::none);
    CHECK(slots[2].key == 1);
    CHECK(slots[3].key == slots[0].key);
    CHECK(check.charged().keys[0].id != check.charged().keys[1].id);
    CHECK(check.charged().keys[0].id == h.hash("descriptor:remote_address", "10.0.0.1"));
}

TEST_CASE("descriptors: cost 0 is a query beside the counted ones, and too many are refused") {
    compiled c;
    const auto* api = limit::find_domain(c.domains, "api");
    const identity::hasher h("secret");
    const std::vector<limit::descriptor_entry> a{{"remote_address", "a"}}, b{{"remote_address", "b"}};
    limit::descriptor_check check;
    const std::vector<limit::descriptor_ask> mixed{{a, 1}, {b, 0}};
    REQUIRE(check.prepare(h, api, mixed) == "");
    CHECK(check.charged().keys.size() == 1);
    CHECK(check.queried().keys.size() == 1);
    CHECK(check.queried().query);
    CHECK(check.queried().cost == 0);

    // One identifier at two costs is two keys: nine of them are too many too.
    std::vector<limit::descriptor_ask> costs;
    for (std::int64_t cost = 1; cost <= 9; ++cost) costs.push_back({a, cost});
    CHECK(check.prepare(h, api, costs).find("more than 8") != std::string::npos);

    const std::vector<std::string> values{"0", "1", "2", "3", "4", "5", "6", "7", "8"};
    std::vector<std::vector<limit::descriptor_entry>> entries;
    for (const auto& v : values) entries.push_back({{"remote_address", v}});
    std::vector<limit::descriptor_ask> nine;
    for (const auto& e : entries) nine.push_back({e, 1});
    CHECK(check.prepare(h, api, nine).find("more than 8") != std::string::npos);
    nine.pop_back();
    CHECK(check.prepare(h, api, nine) == "");

    const std::vector<limit::descriptor_ask> empty{{{}, 1}};
    CHECK(check.prepare(h, api, empty) == "descriptors[0] has no entries");
}

TEST_CASE("descriptors: counted descriptors of different costs are one request per cost, ordered by cost") {
    compiled c;
    const auto* api = limit::find_domain(c.domains, "api");
    const identity::hasher h("secret");
    const std::vector<limit::descriptor_entry> a{{"remote_address", "a"}}, b{{"remote_address", "b"}},
        d{{"remote_address", "d"}};
    limit::descriptor_check check;
    // b at 4, a at 1, d at 4, a at 4 (another key than a at 1), a at 1 again (the same key), and a query.
    const std::vector<limit::descriptor_ask> asks{{b, 4}, {a, 1}, {d, 4}, {a, 4}, {a, 1}, {d, 0}};
    REQUIRE(check.prepare(h, api, asks) == "");
    const auto groups = check.charged_groups();
    REQUIRE(groups.size() == 2);
    CHECK(groups[0].cost == 1);
    CHECK(groups[0].keys.size() == 1);
    CHECK(groups[1].cost == 4);
    CHECK(groups[1].keys.size() == 3);
    // Consecutive spans of the charged keys, and each slot follows its key.
    REQUIRE(check.charged().keys.size() == 4);
    CHECK(groups[0].keys.data() == check.charged().keys.data());
    CHECK(groups[1].keys.data() == check.charged().keys.data() + 1);
    const auto s = check.slots();
    using part = limit::descriptor_check::part;
    for (std::size_t i = 0; i < 5; ++i) REQUIRE(s[i].in == part::charged);
    CHECK(s[1].key == 0);
    CHECK(s[4].key == 0);
    CHECK(s[0].key == 1);  // b, first of the cost-4 keys in call order
    CHECK(s[2].key == 2);
    CHECK(s[3].key == 3);
    const auto& keys = check.charged().keys;
    CHECK(keys[0].id == h.hash("descriptor:remote_address", "a"));
    CHECK(keys[1].id == h.hash("descriptor:remote_address", "b"));
    CHECK(keys[2].id == h.hash("descriptor:remote_address", "d"));
    CHECK(keys[3].id == keys[0].id);
    CHECK(check.key_cost(part::charged, 0) == 1);
    CHECK(check.key_cost(part::charged, 3) == 4);
    CHECK(s[5].in == part::queried);
    CHECK(check.queried().cost == 0);

    // One cost (the common case): one group, charged() itself.
    const std::vector<limit::descriptor_ask> one{{a, 3}, {b, 3}};
    REQUIRE(check.prepare(h, api, one) == "");
    REQUIRE(check.charged_groups().size() == 1);
    CHECK(check.charged_groups()[0].keys.size() == 2);
    CHECK(check.charged_groups()[0].cost == 3);
    CHECK(check.charged().cost == 3);
    // Nothing counted: no group.
    const std::vector<limit::descriptor_ask> query{{a, 0}};
    REQUIRE(check.prepare(h, api, query) == "");
    CHECK(check.charged_groups().empty());
}

TEST_CASE(
    "descriptors: shadow_mode, from service.domains or a ratelimit file, puts a node's descriptors in the "
    "shadow requests") {
    const auto dir =
        std::filesystem::temp_directory_path() /
        ("sluice-descriptors-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(dir);
    const auto file = (dir / "legacy.yaml").string();
    {
        std::ofstream out(file);
        out << "domain: legacy\ndescriptors:\n"
               "  - { key: trial, shadow_mode: true, rate_limit: { unit: day, requests_per_unit: 2 } }\n"
               "  - { key: plain, shadow_mode: false, rate_limit: { unit: day, requests_per_unit: 2 } }\n"
               "  - { key: outer, shadow_mode: true, descriptors: [ { key: inner, rate_limit: { unit: hour, "
               "requests_per_unit: 1 } } ] }\n";
    }
    const std::string text = R"(
upstream: { url: "http://127.0.0.1:3000" }
service:
  ratelimit_config_files: [ ")" +
                             file + R"(" ]
  domains:
    api:
      descriptors:
        - { key: enforced, tiers: [ {limit: 1, per: 1m} ] }
        - key: trial
          shadow_mode: true
          tiers: [ {limit: 2, per: 1m} ]
          descriptors: [ { key: inner, tiers: [ {limit: 3, per: 1m} ] } ]
)";
    const auto cfg = config::load_string(text, "test.yaml");
    std::filesystem::remove_all(dir);
    const auto domains = limit::compile_domains(*cfg, limit::compile_policies(*cfg));
    const auto* api = limit::find_domain(domains, "api");
    const auto* legacy = limit::find_domain(domains, "legacy");
    REQUIRE(api != nullptr);
    REQUIRE(legacy != nullptr);

    const std::vector<limit::descriptor_entry> trial{{"trial", "x"}}, enforced{{"enforced", "x"}};
    const std::vector<limit::descriptor_entry> inner{{"trial", "x"}, {"inner", "y"}};
    REQUIRE(limit::match(*api, trial) != nullptr);
    CHECK(limit::match(*api, trial)->shadow);
    CHECK(!limit::match(*api, enforced)->shadow);
    CHECK(!limit::match(*api, inner)->shadow);  // not inherited
    const std::vector<limit::descriptor_entry> file_trial{{"trial", "x"}}, file_plain{{"plain", "x"}};
    const std::vector<limit::descriptor_entry> file_inner{{"outer", "x"}, {"inner", "y"}};
    CHECK(limit::match(*legacy, file_trial)->shadow);
    CHECK(!limit::match(*legacy, file_plain)->shadow);
    CHECK(!limit::match(*legacy, file_inner)->shadow);

    const identity::hasher h("secret");
    using part = limit::descriptor_check::part;
    limit::descriptor_check check;
    const std::vector<limit::descriptor_ask> asks{{enforced, 2}, {trial, 2}, {inner, 2}, {trial, 0}};
    REQUIRE(check.prepare(h, api, asks) == "");
    CHECK(check.slots()[0].in == part::charged);
    CHECK(check.slots()[1].in == part::shadow);
    CHECK(check.slots()[2].in == part::charged);
    CHECK(check.slots()[3].in == part::shadow_queried);
    CHECK(check.charged().keys.size() == 2);
    CHECK(check.request(part::shadow).keys.size() == 1);
    CHECK(check.request(part::shadow).cost == 2);
    CHECK(!check.request(part::shadow).query);
    CHECK(check.request(part::shadow_queried).query);
    CHECK(check.request(part::shadow_queried).cost == 0);
    CHECK(check.queried().keys.empty());
    // A shadow descriptor keeps its own cost (it is asked alone).
    const std::vector<limit::descriptor_ask> costs{{enforced, 1}, {trial, 2}};
    REQUIRE(check.prepare(h, api, costs) == "");
    CHECK(check.charged().cost == 1);
    CHECK(check.key_cost(part::shadow, 0) == 2);
}

namespace {

// A config whose domain `rls` has `tiers: plan` nodes (one of its own, one sharing policy
// api's), and a registry: acme on pro, globex without a plan, initech on a plan the config lacks
// is refused by the config, so initech names none and default_plan is unset.
struct plan_config {
    explicit plan_config(const std::string& default_plan = "") {
        dir =
            std::filesystem::temp_directory_path() /
            ("sluice-plan-descriptors-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
        std::filesystem::create_directories(dir);
        const auto keys = (dir / "keys.yaml").string();
        {
            std::ofstream out(keys);
            out << "- { sha256: 744bebc72d973d7477c95aaa76043fc3c7cac21de46335ae24b862412b93a144, user: acme, plan: "
                   "pro }\n"
                   "- { sha256: 3e845533f90d500e6492856aa33dbc3f5893a399b177753cb310cbc21c652746, user: acme, plan: "
                   "pro }\n"
                   "- { sha256: 958a120c2df0fd2f9babe1b06ea3f39c5886326a181d9def6b01441172d7d136, user: globex }\n";
        }
        const std::string text = R"(
upstream: { url: "http://127.0.0.1:3000" }
clients:
  user:
    api_key_header: X-API-Key
    api_keys: { file: ")" + keys +
                                 R"(", require_known: true }
)" + (default_plan.empty() ? "" : "    default_plan: " + default_plan + "\n") +
                                 R"(plans:
  free: { user: [ {limit: 2, per: 1m, algorithm: log} ] }
  pro:  { user: [ {limit: 4, per: 1m, algorithm: log} ] }
policies:
  api: { user: plan }
service:
  domains:
    rls:
      descriptors:
        - { key: api_key, tiers: plan }
        - { key: shared_key, tiers: plan, policy: api }
)";
        cfg = config::load_string(text, "test.yaml");
        policies = limit::compile_policies(*cfg);
        domains = limit::compile_domains(*cfg, policies);
        users.emplace(cfg->clients);
    }
    ~plan_config() { std::filesystem::remove_all(dir); }
    limit::key_registry registry() const { return {&*users, cfg->clients.default_plan}; }

    std::filesystem::path dir;
    std::shared_ptr<const config::config> cfg;
    std::vector<limit::policy> policies;
    std::vector<limit::descriptor_domain> domains;
    std::optional<identity::user_resolver> users;
};

}  // namespace

TEST_CASE("descriptors: tiers: plan limits a key's registry user by its plan, its own or a policy's identifier") {
    plan_config c;
    const auto* rls = limit::find_domain(c.domains, "rls");
    REQUIRE(rls != nullptr);
    const std::vector<limit::descriptor_entry> one{{"api_key", "acme-key-one-0001"}};
    const std::vector<limit::descriptor_entry> two{{"api_key", "acme-key-two-0002"}};
    const auto* n = limit::match(*rls, one);
    REQUIRE(n != nullptr);
    CHECK(n->by_plan);
    CHECK(n->limited());
    CHECK(std::string(identity::to_string(n->kind)) == "descriptor:api_key");
    REQUIRE(n->plans.size() == 2);
    CHECK(n->plans[1].plan == "pro");
    CHECK(n->plans[1].user[0].id == "rls@pro/descriptor:api_key/log/1m/1m");
    CHECK(n->plans[1].user[0].name == "pro-descriptor:api_key-1m");
    CHECK(n->plans[1].user[0].limit == 4);

    // The shared node holds the policy's own plan tiers.
    const std::vector<limit::descriptor_entry> shared{{"shared_key", "acme-key-one-0001"}};
    const auto* s = limit::match(*rls, shared);
    REQUIRE(s != nullptr);
    CHECK(s->user_kind == identity::kind::user);
    REQUIRE(s->plans.size() == 2);
    CHECK(s->plans[1].user[0].id == c.policies[0].plan_user("pro")->at(0).id);
    CHECK(s->plans[1].user[0].id == "api@pro/user/log/1m/1m");

    const identity::hasher h("secret");
    limit::descriptor_check check;
    // Two keys of one user are one identifier; the shared one is the gateway's user identifier.
    const std::vector<limit::descriptor_ask> asks{{one, 1}, {two, 1}, {shared, 1}};
    REQUIRE(check.prepare(h, rls, asks, c.registry()) == "");
    CHECK(!check.refused());
    REQUIRE(check.charged().keys.size() == 2);
    CHECK(check.slots()[0].key == check.slots()[1].key);
    const auto& own = check.charged().keys[check.slots()[0].key];
    CHECK(own.id == h.hash("descriptor:api_key", "user:acme"));
    CHECK(own.tiers.data() == n->plans[1].user.data());
    const auto& gw = check.charged().keys[check.slots()[2].key];
    CHECK(gw.kind == identity::kind::user);
    CHECK(gw.id == h.hash("user", "user:acme"));
    CHECK(gw.tiers[0].id == "api@pro/user/log/1m/1m");
    CHECK(check.user(0) == "user:acme");
}

TEST_CASE("descriptors: tiers: plan refuses an unknown key, and a user without a plan, before the store") {
    using refusal = limit::descriptor_check::refusal;
    const identity::hasher h("secret");
    const std::vector<limit::descriptor_entry> unknown{{"api_key", "nobody"}}, globex{{"api_key", "globex-key-0003"}};
    const std::vector<limit::descriptor_entry> empty{{"api_key", ""}};
    {
        plan_config c;
        const auto* rls = limit::find_domain(c.domains, "rls");
        limit::descriptor_check check;
        const std::vector<limit::descriptor_ask> a{{unknown, 1}};
        REQUIRE(check.prepare(h, rls, a, c.registry()) == "");
        CHECK(check.refused());
        CHECK(check.slots()[0].refused == refusal::unknown_key);
        CHECK(check.charged().keys.empty());
        const std::vector<limit::descriptor_ask> b{{globex, 1}};
        REQUIRE(check.prepare(h, rls, b, c.registry()) == "");
        CHECK(check.refused());
        CHECK(check.slots()[0].refused == refusal::no_plan);
        const std::vector<limit::descriptor_ask> e{{empty, 1}};  // require_known: a key is required
        REQUIRE(check.prepare(h, rls, e, c.registry()) == "");
        CHECK(check.slots()[0].refused == refusal::unknown_key);
    }
    plan_config with_default("free");
    const auto* rls = limit::find_domain(with_default.domains, "rls");
    limit::descriptor_check check;
    const std::vector<limit::descriptor_ask> b{{globex, 1}};
    REQUIRE(check.prepare(h, rls, b, with_default.registry()) == "");
    CHECK(!check.refused());
    REQUIRE(check.charged().keys.size() == 1);
    CHECK(check.charged().keys[0].tiers[0].limit == 2);  // free
}

TEST_CASE("descriptors: tiers: plan needs plans and a key registry, and policy: a policy with user: plan") {
    const std::string head = "upstream: { url: \"http://127.0.0.1:3000\" }\n";
    const std::string domain = "service:\n  domains:\n    rls:\n      descriptors:\n        - { key: k, tiers: plan";
    const auto error = [](const std::string& text) {
        try {
            config::load_string(text, "t.yaml");
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    CHECK(error(head + domain + " }\n") ==
          "t.yaml:6:28: service.domains.rls.descriptors[0].tiers: tiers: plan needs plans (plans.<name>.user)");
    const std::string plans = "plans: { free: { user: [ {limit: 1, per: 1m} ] } }\n";
    CHECK(error(head + plans + domain + " }\n") ==
          "t.yaml:7:28: service.domains.rls.descriptors[0].tiers: tiers: plan needs a key registry "
          "(clients.user.api_keys)");
    CHECK(error(head + domain + ", policy: api }\n").find("t.yaml:6:28: ") == 0);
    CHECK(error(head + "service:\n  domains:\n    rls:\n      descriptors:\n        - { key: k, policy: api, tiers: "
                       "[ {limit: 1, per: 1m} ] }\n")
              .find("this entry has no tiers: plan") != std::string::npos);
    // policy: with plans and a registry, it must name a policy with `user: plan` that counts as a descriptor does.
    const auto dir =
        std::filesystem::temp_directory_path() /
        ("sluice-plan-errors-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(dir);
    const auto keys = (dir / "keys.yaml").string();
    {
        std::ofstream out(keys);
        out << "- { sha256: 744bebc72d973d7477c95aaa76043fc3c7cac21de46335ae24b862412b93a144, user: acme }\n";
    }
    const std::string with_registry = head + "clients: { user: { api_key_header: X-API-Key, api_keys: { file: \"" +
                                      keys + "\" } } }\n" + plans +
                                      "policies:\n  fixed: { user: [ {limit: 1, per: 1m} ] }\n"
                                      "  penalty: { user: plan, count_rejected: true }\n";
    const auto line = [&](const std::string& policy) {
        return with_registry + domain + ", policy: " + policy + " }\n";
    };
    CHECK(error(line("nope")) == "t.yaml:11:42: service.domains.rls.descriptors[0].policy: no policy named \"nope\"");
    CHECK(error(line("fixed")).find("policy fixed has no `user: plan`") != std::string::npos);
    CHECK(error(line("penalty")).find("counts refused requests (count_rejected)") != std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST_CASE(
    "descriptors: a ratelimit file's value ending in '*' is a prefix: exact value, then the first prefix, "
    "then the key alone") {
    const auto dir = std::filesystem::temp_directory_path() /
                     ("sluice-wildcard-" + std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
    std::filesystem::create_directories(dir);
    const auto file = (dir / "wild.yaml").string();
    {
        std::ofstream out(file);
        out << "domain: wild\ndescriptors:\n"
               "  - { key: path, rate_limit: { unit: hour, requests_per_unit: 1 } }\n"
               "  - { key: path, value: \"/api/*\", rate_limit: { unit: hour, requests_per_unit: 2 } }\n"
               "  - { key: path, value: \"/api/admin*\", rate_limit: { unit: hour, requests_per_unit: 3 } }\n"
               "  - { key: path, value: \"/api/users\", rate_limit: { unit: hour, requests_per_unit: 4 } }\n";
    }
    const std::string text = R"(
upstream: { url: "http://127.0.0.1:3000" }
service:
  ratelimit_config_files: [ ")" +
                             file + R"(" ]
  domains:
    api:
      descriptors:
        - { key: path, value: "/x*", tiers: [ {limit: 5, per: 1m} ] }
)";
    const auto cfg = config::load_string(text, "test.yaml");
    std::filesystem::remove_all(dir);
    const auto domains = limit::compile_domains(*cfg, limit::compile_policies(*cfg));
    const auto* wild = limit::find_domain(domains, "wild");
    REQUIRE(wild != nullptr);
    const auto limit_of = [&](const char* value) {
        const std::vector<limit::descriptor_entry> e{{"path", value}};
        const auto* n = limit::match(*wild, e);
        return n ? n->tiers.at(0).limit : -1;
    };
    CHECK(limit_of("/api/users") == 4);       // the exact value first
    CHECK(limit_of("/api/admin/keys") == 2);  // then the first prefix in file order, as envoyproxy/ratelimit
    CHECK(limit_of("/api/") == 2);
    CHECK(limit_of("/web") == 1);  // then the key alone
    // In service.domains a '*' is a character like any other.
    const std::vector<limit::descriptor_entry> xy{{"path", "/xy"}}, star{{"path", "/x*"}};
    const auto* api = limit::find_domain(domains, "api");
    CHECK(limit::match(*api, xy) == nullptr);
    CHECK(limit::match(*api, star) != nullptr);
}
