// The limit step as the session runs it (server/limit_step.hpp): admission asks the
// worker's store, an admitted request that meets a concurrency tier holds its slots until
// release(), a store error gives them back at once, and on a route that settles its charge
// the admission's receipt is kept and the charge settled: given back through take_back, or
// raised by a check. A real worker and config, a store that records what it is asked.
#include "server/limit_step.hpp"

#include "server/snapshot.hpp"

#include <doctest/doctest.h>
#include <boost/asio/co_spawn.hpp>

#include <vector>

namespace {

namespace asio = boost::asio;
namespace limit = sluice::limit;
using limit::decision_kind;

// Answers every check at once: admitted, or an error when `failing`; records each request
// and lease change.
struct recording_store : limit::store {
    struct asked {
        std::int64_t cost;
        bool count_rejected;
        std::uint64_t lease;
        std::size_t keys;
        bool want_receipt;
        bool uncached;
    };
    struct taken_back {
        std::int64_t cost;  // of the request given
        std::vector<limit::usec> at;
        std::int64_t amount;
    };
    bool failing = false;
    bool denying = false;          // every check is denied
    bool take_back_fails = false;  // take_back answers false
    std::vector<asked> checks;
    std::vector<taken_back> take_backs;
    std::vector<std::pair<limit::lease_change, std::uint64_t>> changes;

    std::optional<limit::check_result> try_check(const limit::check_request& r) override {
        checks.push_back({r.cost, r.count_rejected, r.lease, r.keys.size(), r.want_receipt, r.uncached});
        limit::check_result res;
        if (failing) {
            res.state = limit::check_result::status::error;
            res.error = "timeout";
        } else {
            res.verdict.allowed = !denying;
            if (r.want_receipt && !denying)
                res.taken.at.assign(r.keys.size(), 1000 + static_cast<limit::usec>(checks.size()));
        }
        return res;
    }
    asio::awaitable<bool> take_back(limit::check_request r, limit::receipt rc, std::int64_t amount) override {
        take_backs.push_back({r.cost, rc.at, amount});
        const bool done = !take_back_fails;
        co_return done;
    }
    asio::awaitable<limit::check_result> check(limit::check_request) override { co_return limit::check_result{}; }
    void change_lease(const limit::check_request& r, limit::lease_change c) override {
        changes.emplace_back(c, r.lease);
    }
    std::size_t keys_held() const override { return 0; }
    asio::awaitable<bool> reset(limit::check_request) override {
        const bool done = true;
        co_return done;
    }
};

struct rig {
    sluice::metrics::registry metrics{1};
    recording_store store;
    std::atomic<std::size_t> open{0};
    std::unique_ptr<sluice::server::worker> w;
    sluice::route::route limited;  // the policy `p`, cost 1

    explicit rig(const std::string& policy) {
        auto cfg = sluice::config::load_string(
            "upstream: { url: \"http://127.0.0.1:9\" }\n"
            "policies: { p: " +
                policy +
                " }\n"
                "routes: [ { match: { path_prefix: / }, policy: p } ]\n",
            "limit_step.yaml");
        auto snap = std::make_shared<const sluice::server::snapshot>(cfg, metrics);
        w = std::make_unique<sluice::server::worker>(snap, metrics.worker(0), open, 100, store,
                                                     sluice::identity::hasher(""));
        limited.limits = &snap->policies.at(0);
    }

    // Runs `step` on the worker's loop to its end.
    void run(asio::awaitable<void> step) {
        bool done = false;
        std::exception_ptr error;
        asio::co_spawn(w->ioc, std::move(step), [&](std::exception_ptr e) {
            done = true;
            error = e;
            w->ioc.stop();
        });
        w->ioc.restart();
        w->ioc.run_for(std::chrono::seconds(5));
        REQUIRE(done);
        if (error) std::rethrow_exception(error);
    }
};

sluice::identity::caller at(const char* ip) {
    sluice::identity::caller c;
    c.client = asio::ip::make_address(ip);
    return c;
}

const std::string concurrent = "{ ip: [ { concurrency: 2, lease: 3s } ] }";

}  // namespace

TEST_CASE("limit_step: an admitted request that meets a concurrency tier holds its slots until release()") {
    rig t(concurrent);
    sluice::server::limit_step step(*t.w);
    const auto who = at("192.0.2.7");
    limit::outcome out;
    t.run(step.decide(t.w->snap, &t.limited, who, out));
    CHECK(out.what == limit::outcome::kind::pass);
    CHECK(out.decision == decision_kind::allowed);
    REQUIRE(t.store.checks.size() == 1);
    const auto lease = t.store.checks[0].lease;
    CHECK(lease != 0);
    CHECK(t.store.changes.empty());  // held

    step.release();
    REQUIRE(t.store.changes.size() == 1);
    CHECK(t.store.changes[0] == std::pair{limit::lease_change::release, lease});
    step.release();  // nothing held any more
    CHECK(t.store.changes.size() == 1);
}

TEST_CASE("limit_step: a store error gives the slot back at once, and nothing is held") {
    rig t(concurrent);
    t.store.failing = true;
    sluice::server::limit_step step(*t.w);
    const auto who = at("192.0.2.7");
    limit::outcome out;
    t.run(step.decide(t.w->snap, &t.limited, who, out));
    CHECK(out.decision == decision_kind::store_error);
    CHECK(out.what == limit::outcome::kind::pass);  // store.on_error: allow
    REQUIRE(t.store.checks.size() == 1);
    REQUIRE(t.store.changes.size() == 1);
    CHECK(t.store.changes[0] == std::pair{limit::lease_change::release, t.store.checks[0].lease});
    step.release();
    CHECK(t.store.changes.size() == 1);
}

TEST_CASE("limit_step: no route, or a route without limits, asks the store nothing") {
    rig t(concurrent);
    sluice::server::limit_step step(*t.w);
    const auto who = at("192.0.2.7");
    limit::outcome none, unlimited;
    t.run(step.decide(t.w->snap, nullptr, who, none));
    sluice::route::route free;
    t.run(step.decide(t.w->snap, &free, who, unlimited));
    CHECK(none.decision == decision_kind::none);
    CHECK(unlimited.decision == decision_kind::none);
    CHECK(t.store.checks.empty());
}

// A sample of the registry's /metrics text, or -1 when absent.
double sample(const sluice::metrics::registry& m, const std::string& name) {
    const std::string text = m.scrape();
    const auto at = text.find("\n" + name + " ");
    return at == std::string::npos ? -1 : std::stod(text.substr(at + name.size() + 2));
}

double settled(const sluice::metrics::registry& m, const std::string& result) {
    return sample(m, "sluice_charge_settlements_total{policy=\"p\",result=\"" + result + "\"}");
}

TEST_CASE("limit_step: a route that does not settle asks no receipt, and settle() does nothing") {
    rig t("{ ip: [ { limit: 10, per: 1m } ] }");
    sluice::server::limit_step step(*t.w);
    limit::outcome out;
    t.run(step.decide(t.w->snap, &t.limited, at("192.0.2.7"), out));
    REQUIRE(out.decision == decision_kind::allowed);
    REQUIRE(t.store.checks.size() == 1);
    CHECK_FALSE(t.store.checks[0].want_receipt);
    CHECK_FALSE(t.store.checks[0].uncached);
    CHECK_FALSE(step.settling());
    CHECK(step.charged() == -1);
    t.run(step.settle(0));
    t.run(step.settle(5));
    CHECK(t.store.checks.size() == 1);
    CHECK(t.store.take_backs.empty());
    CHECK(settled(t.metrics, "charged") == 0);
}

TEST_CASE("limit_step: charge reserves at admission, and settle(0) gives the whole cost back, once") {
    rig t("{ ip: [ { limit: 10, per: 1m } ] }");
    t.limited.cost = 3;
    t.limited.charge = sluice::config::charge_config{sluice::config::status_set{{{401, 401}}}, {}};
    t.limited.policy_settles = true;  // as the router sets it
    sluice::server::limit_step step(*t.w);
    limit::outcome out;
    t.run(step.decide(t.w->snap, &t.limited, at("192.0.2.7"), out));
    REQUIRE(out.decision == decision_kind::allowed);
    REQUIRE(t.store.checks.size() == 1);
    CHECK(t.store.checks[0].want_receipt);
    CHECK(t.store.checks[0].uncached);  // its denials may be lifted: never from a deny cache
    CHECK(t.store.checks[0].cost == 3);
    CHECK(step.settling());
    CHECK(step.charged() == 3);
    CHECK_FALSE(step.settled());

    t.run(step.settle(0));
    REQUIRE(t.store.take_backs.size() == 1);
    CHECK(t.store.take_backs[0].amount == 3);
    CHECK(t.store.take_backs[0].cost == 3);  // the admission's request
    CHECK(t.store.take_backs[0].at == std::vector<limit::usec>{1001});
    CHECK(step.charged() == 0);
    CHECK(step.settled());
    CHECK(settled(t.metrics, "refunded") == 1);

    t.run(step.settle(0));  // settled already at 0: nothing moves
    CHECK(t.store.take_backs.size() == 1);
    CHECK(settled(t.metrics, "charged") == 1);
    CHECK(t.store.checks.size() == 1);

    // The next request starts afresh.
    step.clear_charge();
    CHECK_FALSE(step.settling());
    t.run(step.settle(0));
    CHECK(t.store.take_backs.size() == 1);
}

TEST_CASE("limit_step: a reported cost raises the charge by a check, and lowers it by take_back down to 0") {
    rig t("{ ip: [ { limit: 10, per: 1m } ] }");
    t.limited.cost = 2;
    t.limited.cost_header = "X-Cost";
    t.limited.max_cost = 8;
    sluice::server::limit_step step(*t.w);
    limit::outcome out;

    t.run(step.decide(t.w->snap, &t.limited, at("192.0.2.7"), out));
    CHECK(t.store.checks[0].want_receipt);
    t.run(step.settle(5));  // 3 more
    REQUIRE(t.store.checks.size() == 2);
    CHECK(t.store.checks[1].cost == 3);
    CHECK(t.store.checks[1].count_rejected);  // counted even past the limit
    CHECK(t.store.checks[1].lease == 0);
    CHECK_FALSE(t.store.checks[1].want_receipt);
    CHECK(t.store.checks[1].keys == t.store.checks[0].keys);
    CHECK(step.charged() == 5);
    CHECK(settled(t.metrics, "raised") == 1);
    // Settled again lower (Sluice's own answer replaced the response): only the admission
    // has a receipt, so at most its cost comes back.
    t.run(step.settle(0));
    REQUIRE(t.store.take_backs.size() == 1);
    CHECK(t.store.take_backs[0].amount == 2);
    CHECK(step.charged() == 3);

    // Another request, lowered to 1 by its report.
    t.run(step.decide(t.w->snap, &t.limited, at("192.0.2.7"), out));
    t.run(step.settle(1));
    REQUIRE(t.store.take_backs.size() == 2);
    CHECK(t.store.take_backs[1].amount == 1);
    CHECK(step.charged() == 1);
    CHECK(settled(t.metrics, "refunded") == 2);
}

TEST_CASE("limit_step: a take_back the store fails leaves the charge, counted as a store error") {
    rig t("{ ip: [ { limit: 10, per: 1m } ] }");
    t.limited.charge = sluice::config::charge_config{std::nullopt, sluice::config::status_set{{{500, 599}}}};
    t.store.take_back_fails = true;
    sluice::server::limit_step step(*t.w);
    limit::outcome out;
    t.run(step.decide(t.w->snap, &t.limited, at("192.0.2.7"), out));
    t.run(step.settle(0));
    CHECK(t.store.take_backs.size() == 1);
    CHECK(step.charged() == 1);
    CHECK(settled(t.metrics, "failed") == 1);
    CHECK(settled(t.metrics, "refunded") == 0);
    CHECK(sample(t.metrics, "sluice_store_errors_total") == 1);
    t.store.take_back_fails = false;  // settled again, it is given back now
    t.run(step.settle(0));
    CHECK(t.store.take_backs.size() == 2);
    CHECK(step.charged() == 0);
}

TEST_CASE("limit_step: a shadow policy's denial reserved nothing: only more is charged") {
    rig t("{ shadow: true, ip: [ { limit: 10, per: 1m } ] }");
    t.limited.cost = 2;
    t.limited.cost_header = "X-Cost";
    t.limited.max_cost = 8;
    t.store.denying = true;
    sluice::server::limit_step step(*t.w);
    limit::outcome out;
    t.run(step.decide(t.w->snap, &t.limited, at("192.0.2.7"), out));
    REQUIRE(out.decision == decision_kind::shadow_limited);
    CHECK(step.settling());
    t.run(step.settle(0));
    CHECK(t.store.take_backs.empty());
    CHECK(step.charged() == 2);
    t.run(step.settle(6));
    REQUIRE(t.store.checks.size() == 2);
    CHECK(t.store.checks[1].cost == 4);
    CHECK(step.charged() == 6);
}

TEST_CASE("limit_step: a refusal, or a store error under on_error allow, is not settled") {
    rig t("{ ip: [ { limit: 10, per: 1m } ] }");
    t.limited.charge = sluice::config::charge_config{sluice::config::status_set{{{401, 401}}}, {}};
    sluice::server::limit_step step(*t.w);
    limit::outcome refused, failed;
    t.store.denying = true;
    t.run(step.decide(t.w->snap, &t.limited, at("192.0.2.7"), refused));
    CHECK(refused.decision == decision_kind::limited);
    CHECK_FALSE(step.settling());
    t.store.denying = false;
    t.store.failing = true;
    t.run(step.decide(t.w->snap, &t.limited, at("192.0.2.7"), failed));
    CHECK(failed.decision == decision_kind::store_error);
    CHECK_FALSE(step.settling());
    t.run(step.settle(0));
    CHECK(t.store.take_backs.empty());
    CHECK(t.store.checks.size() == 2);
}
