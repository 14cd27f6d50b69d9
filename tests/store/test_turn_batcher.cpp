// turn_batcher without sockets: a fake sender in place of the EVALSHA over a transport
// records each batch it is given and answers it (or fails, throws, or holds it).
#include "store/turn_batcher.hpp"

#include "store/redis_transport.hpp"

#include <doctest/doctest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
using namespace sluice::store;
using sluice::limit::check_request;
using sluice::limit::check_result;

struct fake_sender {
    enum class mode { answer, no_results, throws, hold };
    struct sent {
        std::uint16_t slot = 0;
        std::vector<std::int64_t> costs;  // the requests' costs, in the order given
    };

    explicit fake_sender(asio::io_context& ioc) : release(ioc) {}

    // Each request's result: allowed iff its cost is even, its cost as retry_after.
    asio::awaitable<void> send(std::uint16_t slot, turn_batcher::requests rs, std::vector<check_result>& out,
                               redis_clock::time_point) {
        sent s{slot, {}};
        for (const auto* r : rs) s.costs.push_back(r->cost);
        batches.push_back(std::move(s));
        if (how == mode::throws) throw std::runtime_error("the fake sender throws");
        if (how == mode::no_results) co_return;
        if (how == mode::hold) {
            release.expires_at(redis_clock::time_point::max());
            co_await release.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        for (const auto* r : rs) {
            check_result c;
            c.verdict.allowed = r->cost % 2 == 0;
            c.verdict.retry_after = r->cost;
            out.push_back(std::move(c));
        }
    }

    turn_batcher::send_fn fn() {
        return [this](std::uint16_t slot, turn_batcher::requests rs, std::vector<check_result>& out,
                      redis_clock::time_point deadline) { return send(slot, rs, out, deadline); };
    }

    mode how = mode::answer;
    std::vector<sent> batches;
    asio::steady_timer release;  // mode hold: cancel() answers the held batches
};

// Checks of costs 1..n, asked in one turn: those on slot_of(i) for the i-th.
struct turn {
    std::vector<check_request> requests;
    std::vector<std::optional<check_result>> results;

    turn(std::size_t n) : requests(n), results(n) {
        for (std::size_t i = 0; i < n; ++i) requests[i].cost = static_cast<std::int64_t>(i + 1);
    }
    template <class SlotOf>
    void ask(asio::io_context& ioc, turn_batcher& b, SlotOf slot_of) {
        for (std::size_t i = 0; i < requests.size(); ++i)
            asio::co_spawn(ioc, one(b, &requests[i], static_cast<std::uint16_t>(slot_of(i)), &results[i]),
                           asio::detached);
    }
    static asio::awaitable<void> one(turn_batcher& b, const check_request* r, std::uint16_t slot,
                                     std::optional<check_result>* out) {
        *out = co_await b.decide(*r, slot, redis_clock::now() + std::chrono::seconds(1));
    }
    std::size_t answered() const {
        std::size_t n = 0;
        for (const auto& r : results) n += r.has_value();
        return n;
    }
};

constexpr auto slot0 = [](std::size_t) { return 0; };

bool own_answer(const check_result& r, std::int64_t cost) {
    return r.state == check_result::status::ok && r.verdict.retry_after == cost && r.verdict.allowed == (cost % 2 == 0);
}

}  // namespace

TEST_CASE("turn_batcher: the checks of one turn go in one call, each gets its own result") {
    asio::io_context ioc;
    fake_sender fake(ioc);
    turn_batcher b(ioc.get_executor(), 1024, fake.fn());
    turn t(10);
    t.ask(ioc, b, slot0);
    ioc.run();
    REQUIRE(fake.batches.size() == 1);
    CHECK(fake.batches[0].costs == std::vector<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});  // as asked
    for (std::size_t i = 0; i < 10; ++i) {
        REQUIRE(t.results[i]);
        CHECK(own_answer(*t.results[i], static_cast<std::int64_t>(i + 1)));
    }
    CHECK(b.in_flight() == 0);
}

TEST_CASE("turn_batcher: at most 64 checks per call, and the one that finds a batch full leads the next") {
    asio::io_context ioc;
    fake_sender fake(ioc);
    turn_batcher b(ioc.get_executor(), 1024, fake.fn());
    turn t(150);
    t.ask(ioc, b, slot0);
    ioc.run();
    REQUIRE(fake.batches.size() == 3);
    CHECK(fake.batches[0].costs.size() == turn_batcher::max_batch);
    CHECK(fake.batches[1].costs.size() == turn_batcher::max_batch);
    CHECK(fake.batches[2].costs.size() == 150 - 2 * turn_batcher::max_batch);
    CHECK(fake.batches[1].costs.front() == 65);
    REQUIRE(t.answered() == 150);
    for (std::size_t i = 0; i < 150; ++i) CHECK(own_answer(*t.results[i], static_cast<std::int64_t>(i + 1)));
}

TEST_CASE("turn_batcher: one call per slot per turn") {
    asio::io_context ioc;
    fake_sender fake(ioc);
    turn_batcher b(ioc.get_executor(), 1024, fake.fn());
    turn t(9);
    t.ask(ioc, b, [](std::size_t i) { return 100 + i % 3; });
    ioc.run();
    REQUIRE(fake.batches.size() == 3);
    for (const auto& s : fake.batches) {
        REQUIRE(s.costs.size() == 3);
        for (auto cost : s.costs) CHECK(static_cast<std::size_t>(100 + (cost - 1) % 3) == s.slot);
    }
    REQUIRE(t.answered() == 9);
    for (std::size_t i = 0; i < 9; ++i) CHECK(own_answer(*t.results[i], static_cast<std::int64_t>(i + 1)));
}

TEST_CASE("turn_batcher: a check asked in a later turn is in a later call") {
    asio::io_context ioc;
    fake_sender fake(ioc);
    turn_batcher b(ioc.get_executor(), 1024, fake.fn());
    turn first(3), second(2);
    first.ask(ioc, b, slot0);
    ioc.run();
    ioc.restart();
    second.ask(ioc, b, slot0);
    ioc.run();
    REQUIRE(fake.batches.size() == 2);
    CHECK(fake.batches[0].costs.size() == 3);
    CHECK(fake.batches[1].costs.size() == 2);
    CHECK(first.answered() == 3);
    CHECK(second.answered() == 2);
}

TEST_CASE("turn_batcher: beyond max_in_flight unanswered checks, a check fails at once") {
    asio::io_context ioc;
    fake_sender fake(ioc);
    fake.how = fake_sender::mode::hold;
    turn_batcher b(ioc.get_executor(), 3, fake.fn());
    turn t(5);
    t.ask(ioc, b, slot0);
    while (fake.batches.empty()) ioc.run_one();
    ioc.poll();
    CHECK(b.in_flight() == 3);
    REQUIRE(t.answered() == 2);  // the last two, at once
    for (std::size_t i = 3; i < 5; ++i) {
        REQUIRE(t.results[i]);
        CHECK(t.results[i]->state == check_result::status::error);
        CHECK(t.results[i]->error == to_string(redis_error::overloaded));
    }
    fake.release.cancel();
    ioc.run();
    REQUIRE(fake.batches.size() == 1);
    CHECK(fake.batches[0].costs == std::vector<std::int64_t>{1, 2, 3});
    for (std::size_t i = 0; i < 3; ++i) CHECK(own_answer(*t.results[i], static_cast<std::int64_t>(i + 1)));
    CHECK(b.in_flight() == 0);
}

TEST_CASE("turn_batcher: a failed or throwing send fails every check of its batch, once, without resending") {
    for (auto how : {fake_sender::mode::no_results, fake_sender::mode::throws}) {
        asio::io_context ioc;
        fake_sender fake(ioc);
        fake.how = how;
        turn_batcher b(ioc.get_executor(), 1024, fake.fn());
        turn t(4);
        t.ask(ioc, b, slot0);
        ioc.run();
        CHECK(fake.batches.size() == 1);
        REQUIRE(t.answered() == 4);
        for (const auto& r : t.results) CHECK(r->state == check_result::status::error);
        CHECK(b.in_flight() == 0);
    }
}
