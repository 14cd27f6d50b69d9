// The limit step as the session runs it (server/limit_step.hpp): admission asks the
// worker's store, an admitted request that meets a concurrency tier holds its slots until
// release(), a store error gives them back at once, and a reported cost is charged to the
// same identifiers. A real worker and config, a store that records what it is asked.
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
    };
    bool failing = false;
    std::vector<asked> checks;
    std::vector<std::pair<limit::lease_change, std::uint64_t>> changes;

    std::optional<limit::check_result> try_check(const limit::check_request& r) override {
        checks.push_back({r.cost, r.count_rejected, r.lease, r.keys.size()});
        limit::check_result res;
        if (failing) {
            res.state = limit::check_result::status::error;
            res.error = "timeout";
        } else {
            res.verdict.allowed = true;
        }
        return res;
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

TEST_CASE("limit_step: charge() counts a reported cost to the same identifiers, only after an admission") {
    rig t("{ ip: [ { limit: 10, per: 1m } ] }");
    sluice::server::limit_step step(*t.w);
    const auto who = at("192.0.2.7");
    limit::outcome out;
    t.run(step.decide(t.w->snap, &t.limited, who, out));
    REQUIRE(out.decision == decision_kind::allowed);
    t.run(step.charge(4, out.decision));
    REQUIRE(t.store.checks.size() == 2);
    CHECK(t.store.checks[1].cost == 4);
    CHECK(t.store.checks[1].count_rejected);  // counted even past the limit
    CHECK(t.store.checks[1].lease == 0);
    CHECK(t.store.checks[1].keys == t.store.checks[0].keys);

    t.run(step.charge(4, decision_kind::shadow_limited));
    CHECK(t.store.checks.size() == 3);
    t.run(step.charge(4, decision_kind::limited));
    t.run(step.charge(4, decision_kind::bypass));
    t.run(step.charge(0, decision_kind::allowed));
    CHECK(t.store.checks.size() == 3);
}
