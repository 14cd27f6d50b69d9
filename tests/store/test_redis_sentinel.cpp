// Sentinel replies without sockets: SENTINEL get-master-addr-by-name and the +switch-master
// messages of the subscription, as a sentinel sends them (RESP bytes through reply_reader).
#include "store/redis_sentinel.hpp"

#include <doctest/doctest.h>

#include <initializer_list>
#include <string>
#include <string_view>

namespace {

using namespace sluice::store;
using sluice::config::host_port;

// The one reply `resp` holds.
reply_ptr parse(std::string_view resp) {
    reply_reader reader;
    REQUIRE(reader.feed(resp));
    reply_ptr out;
    REQUIRE(reader.next(out) == reply_reader::status::reply);
    return out;
}

// (Appended piece by piece: GCC 12 warns falsely (-Wrestrict) on "literal" + std::string.)
std::string bulk(std::string_view s) {
    std::string out("$");
    out.append(std::to_string(s.size())).append("\r\n").append(s).append("\r\n");
    return out;
}

std::string array(std::initializer_list<std::string> items) {
    std::string out("*");
    out.append(std::to_string(items.size())).append("\r\n");
    for (const auto& i : items) out.append(i);
    return out;
}

std::string switch_message(std::string_view text) {
    return array({bulk("message"), bulk("+switch-master"), bulk(text)});
}

}  // namespace

TEST_CASE("sentinel: parse_master_addr reads get-master-addr-by-name") {
    auto r = parse(array({bulk("10.0.0.7"), bulk("6380")}));
    auto primary = sentinel::parse_master_addr(r.get());
    REQUIRE(primary);
    CHECK(*primary == host_port{"10.0.0.7", 6380});

    auto named = sentinel::parse_master_addr(parse(array({bulk("redis-a.internal"), bulk("65535")})).get());
    REQUIRE(named);
    CHECK(*named == host_port{"redis-a.internal", 65535});
}

TEST_CASE("sentinel: parse_master_addr refuses anything but [host, port]") {
    CHECK_FALSE(sentinel::parse_master_addr(nullptr));
    CHECK_FALSE(sentinel::parse_master_addr(parse("*-1\r\n").get()));  // unknown master: nil
    CHECK_FALSE(sentinel::parse_master_addr(parse("$-1\r\n").get()));
    CHECK_FALSE(sentinel::parse_master_addr(parse("-ERR unknown command\r\n").get()));
    CHECK_FALSE(sentinel::parse_master_addr(parse(array({bulk("10.0.0.7")})).get()));
    CHECK_FALSE(sentinel::parse_master_addr(parse(array({bulk("10.0.0.7"), bulk("6380"), bulk("x")})).get()));
    CHECK_FALSE(sentinel::parse_master_addr(parse(array({bulk("10.0.0.7"), ":6380\r\n"})).get()));
    for (const char* port : {"0", "65536", "-1", "63 80", "6380x", "", "99999999999"})
        CHECK_FALSE(sentinel::parse_master_addr(parse(array({bulk("10.0.0.7"), bulk(port)})).get()));
}

TEST_CASE("sentinel: parse_switch reads the new primary of the master asked about") {
    auto to = sentinel::parse_switch("mymaster 10.0.0.1 6379 10.0.0.2 6380", "mymaster");
    REQUIRE(to);
    CHECK(*to == host_port{"10.0.0.2", 6380});
    CHECK_FALSE(sentinel::parse_switch("other 10.0.0.1 6379 10.0.0.2 6380", "mymaster"));
    CHECK_FALSE(sentinel::parse_switch("mymaster 10.0.0.1 6379 10.0.0.2", "mymaster"));
    CHECK_FALSE(sentinel::parse_switch("mymaster 10.0.0.1 6379 10.0.0.2 6380 extra", "mymaster"));
    CHECK_FALSE(sentinel::parse_switch("mymaster 10.0.0.1 6379 10.0.0.2 0", "mymaster"));
    CHECK_FALSE(sentinel::parse_switch("mymaster 10.0.0.1 6379 10.0.0.2 70000", "mymaster"));
    CHECK_FALSE(sentinel::parse_switch("mymaster  10.0.0.1 6379 10.0.0.2 6380", "mymaster"));  // two spaces
    CHECK_FALSE(sentinel::parse_switch("", "mymaster"));
}

TEST_CASE("sentinel: parse_switch_message takes only +switch-master messages") {
    auto to =
        sentinel::parse_switch_message(parse(switch_message("mymaster 10.0.0.1 6379 10.0.0.2 6380")).get(), "mymaster");
    REQUIRE(to);
    CHECK(*to == host_port{"10.0.0.2", 6380});

    // The subscription's confirmation, another master, other shapes.
    CHECK_FALSE(sentinel::parse_switch_message(
        parse(array({bulk("subscribe"), bulk("+switch-master"), ":1\r\n"})).get(), "mymaster"));
    CHECK_FALSE(sentinel::parse_switch_message(parse(switch_message("othermaster 10.0.0.1 6379 10.0.0.2 6380")).get(),
                                               "mymaster"));
    CHECK_FALSE(
        sentinel::parse_switch_message(parse(array({bulk("message"), bulk("+switch-master")})).get(), "mymaster"));
    CHECK_FALSE(sentinel::parse_switch_message(parse(array({bulk("message"), bulk("+switch-master"), ":5\r\n"})).get(),
                                               "mymaster"));
    CHECK_FALSE(sentinel::parse_switch_message(parse("+OK\r\n").get(), "mymaster"));
    CHECK_FALSE(sentinel::parse_switch_message(nullptr, "mymaster"));
}
