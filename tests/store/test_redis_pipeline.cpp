// redis_pipeline, reply_reader and reconnect_backoff without sockets: the test
// plays both the connection (take_batch, write_done) and Redis (replies as RESP bytes).
#include "store/redis_pipeline.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace sluice::store;
using namespace std::chrono_literals;
using rp = redis_pipeline;
using kind = rp::reply_event::kind;

namespace {

// One reply parsed from RESP bytes.
reply_ptr resp(std::string_view bytes) {
    reply_reader r;
    REQUIRE(r.feed(bytes));
    reply_ptr out;
    REQUIRE(r.next(out) == reply_reader::status::reply);
    return out;
}

std::string cmd(std::string_view a, std::string_view b = {}) {
    return b.empty() ? format_command({a}) : format_command({a, b});
}

const std::string noscript = "-NOSCRIPT No matching script. Please use EVAL.\r\n";
const std::string sha = std::string(40, 'a');
const std::string sha_reply = "$40\r\n" + sha + "\r\n";

std::string reply_text(const reply_ptr& r) {
    REQUIRE(r);
    return std::string(r->str, r->len);
}

struct fixture {
    rp::time_point t0 = redis_clock::now();
    rp p{rp::options{.max_in_flight = 8, .stall_after = 1s, .max_resends = 2}, {}, cmd("SCRIPT", "LOAD")};

    fixture() { p.on_connected(t0, 1s); }
    rp::id push(std::string_view name, redis_clock::duration timeout = 50ms, bool evalsha = false) {
        auto r = p.push(cmd("GET", name), t0 + timeout, evalsha);
        REQUIRE(r.error == rp::push_error::none);
        return r.request;
    }
    std::string take(redis_clock::duration at = 0ms) {
        auto b = p.take_batch(t0 + at);
        std::string bytes(b.bytes);
        p.write_done();
        return bytes;
    }
};

}  // namespace

TEST_CASE("format_command produces RESP arrays of bulk strings") {
    CHECK(format_command({"GET", "k"}) == "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    std::vector<std::string> argv{"SET", std::string("a\0b", 3)};
    CHECK(format_command(argv) == std::string("*2\r\n$3\r\nSET\r\n$3\r\na\0b\r\n", 22));
}

TEST_CASE("reply_reader assembles replies split across reads and reports protocol errors") {
    reply_reader r;
    reply_ptr out;
    CHECK(r.feed("*2\r\n:1\r\n$3\r\nab"));
    CHECK(r.next(out) == reply_reader::status::need_more);
    CHECK(r.feed("c\r\n+OK\r\n"));
    REQUIRE(r.next(out) == reply_reader::status::reply);
    REQUIRE(out->type == REDIS_REPLY_ARRAY);
    CHECK(out->element[0]->integer == 1);
    CHECK(std::string(out->element[1]->str) == "abc");
    REQUIRE(r.next(out) == reply_reader::status::reply);
    CHECK(out->type == REDIS_REPLY_STATUS);
    CHECK(r.next(out) == reply_reader::status::need_more);

    r.feed("!bogus\r\n");
    CHECK(r.next(out) == reply_reader::status::error);
    CHECK_FALSE(r.error_text().empty());
    r.reset();
    CHECK(r.feed(":7\r\n"));
    REQUIRE(r.next(out) == reply_reader::status::reply);
    CHECK(out->integer == 7);
}

TEST_CASE("is_noscript_reply") {
    CHECK(is_noscript_reply(resp(noscript).get()));
    CHECK_FALSE(is_noscript_reply(resp("-ERR other\r\n").get()));
    CHECK_FALSE(is_noscript_reply(resp("$8\r\nNOSCRIPT\r\n").get()));
}

TEST_CASE("replies resolve requests in the order they were written") {
    fixture f;
    auto a = f.push("a"), b = f.push("b"), c = f.push("c");
    CHECK(f.p.queued() == 3);
    CHECK(f.take() == cmd("GET", "a") + cmd("GET", "b") + cmd("GET", "c"));
    CHECK(f.p.in_flight() == 3);
    for (auto [id, text] : {std::pair{a, "ra"}, {b, "rb"}, {c, "rc"}}) {
        auto ev = f.p.on_reply(resp(std::string("+") + text + "\r\n"));
        CHECK(ev.what == kind::resolved);
        CHECK(ev.request == id);
        CHECK(reply_text(ev.reply) == text);
    }
    CHECK(f.p.outstanding() == 0);
}

TEST_CASE("one batch at a time: nothing more is handed out until write_done") {
    fixture f;
    f.push("a");
    auto first = f.p.take_batch(f.t0);
    CHECK(first.commands == 1);
    CHECK(f.p.writing());
    f.push("b");
    f.push("c");
    CHECK(f.p.take_batch(f.t0).commands == 0);
    f.p.write_done();
    auto second = f.p.take_batch(f.t0);
    CHECK(second.commands == 2);
    CHECK(second.bytes == cmd("GET", "b") + cmd("GET", "c"));
    f.p.write_done();
    CHECK(f.p.take_batch(f.t0).commands == 0);
}

TEST_CASE("a request that times out before it was written is never sent") {
    fixture f;
    auto a = f.push("a", 50ms);
    auto b = f.push("b", 100ms);
    CHECK(f.p.next_deadline() == f.t0 + 50ms);
    std::vector<rp::id> failed;
    CHECK_FALSE(f.p.expire(f.t0 + 49ms, failed));
    CHECK(failed.empty());
    CHECK_FALSE(f.p.expire(f.t0 + 60ms, failed));
    CHECK(failed == std::vector<rp::id>{a});
    CHECK(f.p.next_deadline() == f.t0 + 100ms);
    CHECK(f.take(60ms) == cmd("GET", "b"));
    auto ev = f.p.on_reply(resp("+rb\r\n"));
    CHECK(ev.what == kind::resolved);
    CHECK(ev.request == b);
}

TEST_CASE("a request that times out after it was written stays as a tombstone") {
    fixture f;
    auto a = f.push("a", 50ms);
    auto b = f.push("b", 100ms);
    f.take();
    std::vector<rp::id> failed;
    CHECK_FALSE(f.p.expire(f.t0 + 50ms, failed));
    CHECK(failed == std::vector<rp::id>{a});
    CHECK(f.p.in_flight() == 2);
    failed.clear();
    CHECK_FALSE(f.p.expire(f.t0 + 60ms, failed));  // already failed: not again
    CHECK(failed.empty());

    auto late = f.p.on_reply(resp("+ra\r\n"));  // a's reply, late: goes to the tombstone
    CHECK(late.what == kind::discarded);
    CHECK_FALSE(late.reply);
    auto ev = f.p.on_reply(resp("+rb\r\n"));
    CHECK(ev.what == kind::resolved);
    CHECK(ev.request == b);
    CHECK(reply_text(ev.reply) == "rb");
}

TEST_CASE("expire handles a mix of written and queued requests at once") {
    fixture f;
    auto a = f.push("a", 30ms);
    f.take();
    auto b = f.push("b", 40ms);
    auto c = f.push("c", 200ms);
    std::vector<rp::id> failed;
    CHECK_FALSE(f.p.expire(f.t0 + 45ms, failed));
    CHECK(failed == std::vector<rp::id>{b, a});  // queued ones first, then written
    CHECK(f.take(45ms) == cmd("GET", "c"));
    CHECK(f.p.on_reply(resp("+ra\r\n")).what == kind::discarded);
    auto ev = f.p.on_reply(resp("+rc\r\n"));
    CHECK(ev.request == c);
}

TEST_CASE("a stalled head asks for a rebuild, disconnect fails everything and resends nothing") {
    fixture f;
    auto a = f.push("a", 50ms);
    f.take();
    auto b = f.push("b", 2s);
    std::vector<rp::id> failed;
    CHECK_FALSE(f.p.expire(f.t0 + 100ms, failed));  // a tombstoned
    CHECK(failed == std::vector<rp::id>{a});
    // Only the stall check remains for the tombstone, plus b's deadline.
    CHECK(f.p.next_deadline() == f.t0 + 1s);
    failed.clear();
    CHECK(f.p.expire(f.t0 + 1s, failed));
    CHECK(failed.empty());

    auto lost = f.p.on_disconnect();
    CHECK(lost == std::vector<rp::id>{b});  // the tombstone was already failed
    CHECK(f.p.current() == rp::state::disconnected);
    CHECK(f.p.outstanding() == 0);
    CHECK(f.p.push(cmd("GET", "x"), f.t0 + 2s).error == rp::push_error::not_ready);

    f.p.on_connected(f.t0 + 2s, 1s);
    CHECK(f.p.ready());
    CHECK(f.p.take_batch(f.t0 + 2s).commands == 0);  // nothing from before is resent
}

TEST_CASE("disconnect fails written and queued requests, written first") {
    fixture f;
    auto a = f.push("a");
    f.p.take_batch(f.t0);  // being written when the connection drops
    auto b = f.push("b");
    CHECK(f.p.on_disconnect() == std::vector<rp::id>{a, b});
    CHECK_FALSE(f.p.writing());
    CHECK(f.p.next_deadline() == std::nullopt);
}

TEST_CASE("NOSCRIPT: the script is loaded again and the request resent, order kept") {
    fixture f;
    auto e1 = f.push("e1", 1s, true);
    auto e2 = f.push("e2", 1s, true);
    auto p3 = f.push("p3", 1s, false);
    f.take();

    auto ev = f.p.on_reply(resp(noscript));
    CHECK(ev.what == kind::resent);
    CHECK(ev.request == e1);
    CHECK(ev.reload_queued);
    auto e4 = f.push("e4", 1s, true);  // queued after the first resend
    ev = f.p.on_reply(resp(noscript));
    CHECK(ev.what == kind::resent);
    CHECK(ev.request == e2);
    CHECK_FALSE(ev.reload_queued);  // one SCRIPT LOAD serves every resend
    // p3 is not an EVALSHA of ours: its error is its answer.
    ev = f.p.on_reply(resp("-ERR p3\r\n"));
    CHECK(ev.what == kind::resolved);
    CHECK(ev.request == p3);

    CHECK(f.take() == cmd("SCRIPT", "LOAD") + cmd("GET", "e1") + cmd("GET", "e2") + cmd("GET", "e4"));
    CHECK(f.p.on_reply(resp(sha_reply)).what == kind::discarded);
    CHECK(f.p.script_sha() == sha);
    for (auto [id, text] : {std::pair{e1, "r1"}, {e2, "r2"}, {e4, "r4"}}) {
        ev = f.p.on_reply(resp(std::string("+") + text + "\r\n"));
        CHECK(ev.what == kind::resolved);
        CHECK(ev.request == id);
        CHECK(reply_text(ev.reply) == text);
    }
    CHECK(f.p.outstanding() == 0);
}

TEST_CASE("NOSCRIPT: a resend written after the reload is not preceded by another reload") {
    fixture f;
    auto e1 = f.push("e1", 1s, true);
    auto e2 = f.push("e2", 1s, true);
    f.take();
    CHECK(f.p.on_reply(resp(noscript)).reload_queued);
    CHECK(f.take() == cmd("SCRIPT", "LOAD") + cmd("GET", "e1"));  // written before e2's reply
    auto ev = f.p.on_reply(resp(noscript));                       // e2 was written before the reload
    CHECK(ev.what == kind::resent);
    CHECK_FALSE(ev.reload_queued);  // the reload in flight runs before e2's resend
    CHECK(f.take() == cmd("GET", "e2"));
    CHECK(f.p.on_reply(resp(sha_reply)).what == kind::discarded);
    CHECK(f.p.on_reply(resp("+1\r\n")).request == e1);
    CHECK(f.p.on_reply(resp("+2\r\n")).request == e2);
}

TEST_CASE("NOSCRIPT: resends are bounded, then the error is the answer") {
    fixture f;
    auto e = f.push("e", 1s, true);
    f.take();
    CHECK(f.p.on_reply(resp(noscript)).what == kind::resent);  // first resend
    f.take();
    CHECK(f.p.on_reply(resp("-ERR load failed\r\n")).what == kind::discarded);  // its reload
    CHECK(f.p.on_reply(resp(noscript)).what == kind::resent);                   // second resend
    f.take();
    CHECK(f.p.on_reply(resp("-ERR load failed\r\n")).what == kind::discarded);
    auto ev = f.p.on_reply(resp(noscript));
    CHECK(ev.what == kind::resolved);
    CHECK(ev.request == e);
    CHECK(is_noscript_reply(ev.reply.get()));
}

TEST_CASE("NOSCRIPT: a resent request that times out while queued is dropped") {
    fixture f;
    auto e = f.push("e", 50ms, true);
    f.take();
    CHECK(f.p.on_reply(resp(noscript)).what == kind::resent);
    std::vector<rp::id> failed;
    f.p.expire(f.t0 + 50ms, failed);
    CHECK(failed == std::vector<rp::id>{e});
    CHECK(f.take(50ms) == cmd("SCRIPT", "LOAD"));  // the reload still goes, e does not
}

TEST_CASE("without a reload command NOSCRIPT is just the answer") {
    rp p{{}, {}, ""};
    auto t0 = redis_clock::now();
    p.on_connected(t0, 1s);
    auto id = p.push(cmd("EVALSHA", "x"), t0 + 1s, true).request;
    p.take_batch(t0);
    auto ev = p.on_reply(resp(noscript));
    CHECK(ev.what == kind::resolved);
    CHECK(ev.request == id);
}

TEST_CASE("the in-flight cap counts queued, written and tombstoned requests") {
    rp p{rp::options{.max_in_flight = 3}, {}, ""};
    auto t0 = redis_clock::now();
    p.on_connected(t0, 1s);
    for (int i = 0; i < 3; ++i) CHECK(p.push(cmd("GET", "k"), t0 + 50ms).error == rp::push_error::none);
    CHECK(p.push(cmd("GET", "k"), t0 + 50ms).error == rp::push_error::overloaded);
    p.take_batch(t0);
    p.write_done();
    std::vector<rp::id> failed;
    p.expire(t0 + 50ms, failed);
    CHECK(failed.size() == 3);
    CHECK(p.push(cmd("GET", "k"), t0 + 100ms).error == rp::push_error::overloaded);  // tombstones hold the slots
    CHECK(p.on_reply(resp("+1\r\n")).what == kind::discarded);
    CHECK(p.push(cmd("GET", "k"), t0 + 100ms).error == rp::push_error::none);
}

TEST_CASE("handshake: requests wait for it, the last reply is the script sha") {
    std::vector<std::string> hs{cmd("AUTH", "pw"), cmd("SCRIPT", "LOAD")};
    rp p{{}, hs, cmd("SCRIPT", "LOAD")};
    auto t0 = redis_clock::now();
    CHECK(p.current() == rp::state::disconnected);
    CHECK(p.push(cmd("GET", "k"), t0 + 1s).error == rp::push_error::not_ready);
    p.on_connected(t0, 1s);
    CHECK(p.current() == rp::state::handshaking);
    CHECK(p.push(cmd("GET", "k"), t0 + 1s).error == rp::push_error::not_ready);
    auto b = p.take_batch(t0);
    CHECK(b.commands == 2);
    CHECK(b.bytes == hs[0] + hs[1]);
    p.write_done();
    auto ev = p.on_reply(resp("+OK\r\n"));
    CHECK(ev.what == kind::handshake);
    CHECK_FALSE(ev.became_ready);
    ev = p.on_reply(resp(sha_reply));
    CHECK(ev.what == kind::handshake);
    CHECK(ev.became_ready);
    CHECK(p.ready());
    CHECK(p.script_sha() == sha);
}

TEST_CASE("handshake: an error reply or a timeout asks for a rebuild") {
    std::vector<std::string> hs{cmd("AUTH", "pw"), cmd("SELECT", "3")};
    rp p{{}, hs, ""};
    auto t0 = redis_clock::now();
    p.on_connected(t0, 1s);
    p.take_batch(t0);
    p.write_done();
    auto ev = p.on_reply(resp("-WRONGPASS invalid username-password pair\r\n"));
    CHECK(ev.what == kind::failed);
    CHECK(ev.error.starts_with("WRONGPASS"));
    CHECK(p.on_disconnect().empty());

    p.on_connected(t0, 1s);
    CHECK(p.next_deadline() == t0 + 1s);
    std::vector<rp::id> failed;
    CHECK_FALSE(p.expire(t0 + 999ms, failed));
    CHECK(p.expire(t0 + 1s, failed));  // queued handshake steps timed out
    CHECK(failed.empty());
}

TEST_CASE("a reply nobody waits for asks for a rebuild") {
    fixture f;
    auto ev = f.p.on_reply(resp("+OK\r\n"));
    CHECK(ev.what == kind::failed);
}

TEST_CASE("reconnect backoff doubles with jitter up to its maximum") {
    reconnect_backoff b(50ms, 2s);
    CHECK(b.next(0.0) == 25ms);
    CHECK(b.next(0.999999) > 99ms);
    CHECK(b.next(0.5) == 150ms);  // 200 ms scaled by 0.75
    for (int i = 0; i < 10; ++i) b.next(0.0);
    CHECK(b.next(0.0) == 1s);
    CHECK(b.next(1.0) == 2s);
    b.reset();
    CHECK(b.next(1.0) == 50ms);
}
