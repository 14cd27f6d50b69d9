// Redis Cluster without sockets: key slots (checked against redis-cli CLUSTER KEYSLOT),
// CLUSTER SLOTS replies and MOVED / ASK redirections.
#include "store/cluster_slots.hpp"

#include <doctest/doctest.h>

#include <cstring>
#include <deque>
#include <memory>
#include <vector>

namespace {

using namespace sluice::store;

// Hand-built hiredis replies (the parser only reads them).
struct reply_tree {
    std::vector<std::unique_ptr<redisReply>> nodes;
    std::vector<std::unique_ptr<redisReply*[]>> arrays;
    std::deque<std::string> strings;  // stable addresses

    redisReply* make(int type) {
        nodes.push_back(std::make_unique<redisReply>());
        std::memset(nodes.back().get(), 0, sizeof(redisReply));
        nodes.back()->type = type;
        return nodes.back().get();
    }
    redisReply* integer(long long v) {
        auto* r = make(REDIS_REPLY_INTEGER);
        r->integer = v;
        return r;
    }
    redisReply* text(int type, const std::string& s) {
        strings.push_back(s);
        auto* r = make(type);
        r->str = strings.back().data();
        r->len = strings.back().size();
        return r;
    }
    redisReply* array(std::vector<redisReply*> items) {
        auto* r = make(REDIS_REPLY_ARRAY);
        arrays.push_back(std::make_unique<redisReply*[]>(items.size()));
        for (std::size_t i = 0; i < items.size(); ++i) arrays.back()[i] = items[i];
        r->element = arrays.back().get();
        r->elements = items.size();
        return r;
    }
};

}  // namespace

TEST_CASE("cluster: key_slot hashes the hash tag as Redis does") {
    // Expected values from `redis-cli CLUSTER KEYSLOT` on Redis 7.0.
    CHECK(cluster::key_slot("123456789") == 12739);
    CHECK(cluster::key_slot("foo") == 12182);
    CHECK(cluster::key_slot("bar") == 5061);
    CHECK(cluster::key_slot("{user1000}.following") == 3443);
    CHECK(cluster::key_slot("foo{}{bar}") == 8363);     // an empty tag: the whole key
    CHECK(cluster::key_slot("foo{{bar}}zap") == 4015);  // the tag is "{bar"
    CHECK(cluster::key_slot("foo{bar}{zap}") == 5061);  // the first tag only: "bar"
    CHECK(cluster::key_slot("sluice:{ip:00112233445566778899aabbccddeeff}") == 6952);
    // An identifier's HASH and its log ZSETs share a slot.
    CHECK(cluster::key_slot("sluice:{ip:00112233445566778899aabbccddeeff}:log:p/ip/log/1m/1m") == 6952);
}

TEST_CASE("cluster: parse_slots reads CLUSTER SLOTS") {
    reply_tree t;
    auto* reply = t.array({
        t.array({t.integer(0), t.integer(5460),
                 t.array({t.text(REDIS_REPLY_STRING, "10.0.0.1"), t.integer(7000), t.text(REDIS_REPLY_STRING, "id1")}),
                 t.array({t.text(REDIS_REPLY_STRING, "10.0.0.4"), t.integer(7003)})}),
        t.array({t.integer(5461), t.integer(16383),
                 t.array({t.text(REDIS_REPLY_STRING, ""), t.integer(7001)})}),  // "": the node asked
    });
    auto ranges = cluster::parse_slots(reply, "10.0.0.9");
    REQUIRE(ranges);
    REQUIRE(ranges->size() == 2);
    CHECK((*ranges)[0].first == 0);
    CHECK((*ranges)[0].last == 5460);
    CHECK((*ranges)[0].primary.host == "10.0.0.1");
    CHECK((*ranges)[0].primary.port == 7000);
    CHECK((*ranges)[1].primary.host == "10.0.0.9");
    CHECK((*ranges)[1].primary.port == 7001);

    CHECK_FALSE(cluster::parse_slots(t.text(REDIS_REPLY_ERROR, "ERR This instance has cluster support disabled"), "h"));
    CHECK_FALSE(cluster::parse_slots(
        t.array({t.array({t.integer(5), t.integer(4), t.array({t.text(REDIS_REPLY_STRING, "h"), t.integer(1)})})}),
        "h"));  // last before first
    CHECK_FALSE(cluster::parse_slots(
        t.array({t.array({t.integer(0), t.integer(16384), t.array({t.text(REDIS_REPLY_STRING, "h"), t.integer(1)})})}),
        "h"));  // past the last slot
    CHECK_FALSE(cluster::parse_slots(
        t.array({t.array({t.integer(0), t.integer(1), t.array({t.text(REDIS_REPLY_STRING, "h"), t.integer(0)})})}),
        "h"));  // port 0
}

TEST_CASE("cluster: parse_redirect reads MOVED and ASK, nothing else") {
    reply_tree t;
    auto moved = cluster::parse_redirect(t.text(REDIS_REPLY_ERROR, "MOVED 3999 127.0.0.1:6381"));
    REQUIRE(moved);
    CHECK(moved->what == cluster::redirect::kind::moved);
    CHECK(moved->slot == 3999);
    CHECK(moved->target.host == "127.0.0.1");
    CHECK(moved->target.port == 6381);
    auto ask = cluster::parse_redirect(t.text(REDIS_REPLY_ERROR, "ASK 12 [::1]:7002"));
    REQUIRE(ask);
    CHECK(ask->what == cluster::redirect::kind::ask);
    CHECK(ask->target.host == "::1");
    CHECK(ask->target.port == 7002);
    auto named = cluster::parse_redirect(t.text(REDIS_REPLY_ERROR, "MOVED 1 redis-2.internal:6379"));
    REQUIRE(named);
    CHECK(named->target.host == "redis-2.internal");

    CHECK_FALSE(cluster::parse_redirect(t.text(REDIS_REPLY_ERROR, "TRYAGAIN Multiple keys request during rehashing")));
    CHECK_FALSE(cluster::parse_redirect(t.text(REDIS_REPLY_ERROR, "CLUSTERDOWN The cluster is down")));
    CHECK_FALSE(cluster::parse_redirect(t.text(REDIS_REPLY_ERROR, "MOVED 16384 127.0.0.1:6381")));  // no such slot
    CHECK_FALSE(cluster::parse_redirect(t.text(REDIS_REPLY_ERROR, "MOVED 1 127.0.0.1")));           // no port
    CHECK_FALSE(cluster::parse_redirect(t.text(REDIS_REPLY_STRING, "MOVED 1 127.0.0.1:1")));        // not an error
    CHECK_FALSE(cluster::parse_redirect(nullptr));
}
