// Tests of identity/address.hpp and identity/hasher.hpp.
#include "identity/address.hpp"
#include "identity/hasher.hpp"

#include <doctest/doctest.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <chrono>

using namespace sluice::identity;
using fk = sluice::config::clients_config::forwarded_kind;

namespace {

address ip(const char* s) { return boost::asio::ip::make_address(s); }

cidr_set set_of(std::initializer_list<const char*> nets) {
    std::vector<sluice::config::cidr> v;
    for (auto n : nets) {
        const std::string s(n);
        const auto slash = s.find('/');
        sluice::config::cidr c;
        c.network = boost::asio::ip::make_address(s.substr(0, slash));
        c.prefix = slash == std::string::npos ? (c.network.is_v4() ? 32 : 128)
                                              : static_cast<unsigned>(std::stoul(s.substr(slash + 1)));
        v.push_back(c);
    }
    return cidr_set(v);
}

address xff(const char* peer, std::vector<std::string_view> values, const cidr_set& trusted) {
    return client_address(ip(peer), values, fk::x_forwarded_for, trusted);
}
address fwd(const char* peer, std::vector<std::string_view> values, const cidr_set& trusted) {
    return client_address(ip(peer), values, fk::forwarded, trusted);
}

}  // namespace

TEST_CASE("identity: normalize turns IPv4-mapped IPv6 into IPv4 and leaves the rest") {
    CHECK(normalize(ip("::ffff:192.0.2.7")) == ip("192.0.2.7"));
    CHECK(normalize(ip("::ffff:192.0.2.7")).is_v4());
    CHECK(normalize(ip("192.0.2.7")) == ip("192.0.2.7"));
    CHECK(normalize(ip("2001:db8::1")) == ip("2001:db8::1"));
    CHECK(normalize(ip("::1")).is_v6());
    CHECK(normalize(ip("::192.0.2.7")).is_v6());  // deprecated v4-compatible: not mapped
}

TEST_CASE("identity: cidr_set membership at prefix edges") {
    const auto s =
        set_of({"10.0.0.0/8", "192.168.1.0/24", "203.0.113.5", "2001:db8::/32", "2001:db8:ffff:1::/64", "fe80::1/128"});
    CHECK(s.size() == 6);
    CHECK_FALSE(s.empty());
    CHECK(s.contains(ip("10.0.0.0")));
    CHECK(s.contains(ip("10.255.255.255")));
    CHECK_FALSE(s.contains(ip("11.0.0.0")));
    CHECK_FALSE(s.contains(ip("9.255.255.255")));
    CHECK(s.contains(ip("192.168.1.255")));
    CHECK_FALSE(s.contains(ip("192.168.2.0")));
    CHECK_FALSE(s.contains(ip("192.168.0.255")));
    CHECK(s.contains(ip("203.0.113.5")));
    CHECK_FALSE(s.contains(ip("203.0.113.4")));
    CHECK_FALSE(s.contains(ip("203.0.113.6")));
    CHECK(s.contains(ip("::ffff:10.1.2.3")));  // mapped input is normalised
    CHECK(s.contains(ip("2001:db8::")));
    CHECK(s.contains(ip("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff")));
    CHECK_FALSE(s.contains(ip("2001:db9::")));
    CHECK_FALSE(s.contains(ip("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff")));
    CHECK(s.contains(ip("fe80::1")));
    CHECK_FALSE(s.contains(ip("fe80::2")));
    CHECK_FALSE(s.contains(ip("fe80::0")));

    // Edges of a /64 and of /1, /0 in both families.
    const auto t = set_of({"2001:db8:0:5::/64"});
    CHECK(t.contains(ip("2001:db8:0:5:ffff:ffff:ffff:ffff")));
    CHECK_FALSE(t.contains(ip("2001:db8:0:6::")));
    CHECK_FALSE(t.contains(ip("2001:db8:0:4:ffff:ffff:ffff:ffff")));
    const auto half = set_of({"128.0.0.0/1"});
    CHECK(half.contains(ip("128.0.0.0")));
    CHECK_FALSE(half.contains(ip("127.255.255.255")));
    const auto all4 = set_of({"0.0.0.0/0"});
    CHECK(all4.contains(ip("1.2.3.4")));
    CHECK_FALSE(all4.contains(ip("2001:db8::1")));
    const auto all6 = set_of({"::/0"});
    CHECK(all6.contains(ip("2001:db8::1")));
    CHECK_FALSE(all6.contains(ip("1.2.3.4")));  // families never mix
    CHECK(cidr_set().empty());
    CHECK_FALSE(cidr_set().contains(ip("127.0.0.1")));

    // An IPv4-mapped network is stored as IPv4.
    const auto mapped = set_of({"::ffff:10.0.0.0/104"});
    CHECK(mapped.contains(ip("10.9.9.9")));
    CHECK_FALSE(mapped.contains(ip("11.0.0.1")));

    // Host bits left set in a network are ignored.
    const cidr_set c(std::vector<sluice::config::cidr>{{ip("172.16.9.9"), 12}});
    CHECK(c.contains(ip("172.31.255.255")));
    CHECK_FALSE(c.contains(ip("172.32.0.0")));
}

TEST_CASE("identity: client_address ignores forwarding headers from an untrusted peer") {
    const auto trusted = set_of({"10.0.0.0/8"});
    CHECK(xff("198.51.100.9", {"1.2.3.4"}, trusted) == ip("198.51.100.9"));
    CHECK(fwd("198.51.100.9", {"for=1.2.3.4"}, trusted) == ip("198.51.100.9"));
    CHECK(xff("::ffff:198.51.100.9", {"1.2.3.4"}, trusted) == ip("198.51.100.9"));
    CHECK(xff("::ffff:198.51.100.9", {"1.2.3.4"}, trusted).is_v4());
    // No header from a trusted peer → the peer.
    CHECK(xff("10.0.0.1", {}, trusted) == ip("10.0.0.1"));
}

TEST_CASE("identity: client_address walks X-Forwarded-For from the right") {
    const auto trusted = set_of({"10.0.0.0/8", "192.0.2.0/24"});
    SUBCASE("chain of trusted proxies") {
        CHECK(xff("10.0.0.1", {"203.0.113.7, 192.0.2.1, 10.1.1.1"}, trusted) == ip("203.0.113.7"));
    }
    SUBCASE("a client prepending fake entries cannot win") {
        CHECK(xff("10.0.0.1", {"6.6.6.6, 1.2.3.4"}, trusted) == ip("1.2.3.4"));
        CHECK(xff("10.0.0.1", {"10.0.0.5, 1.2.3.4"}, trusted) == ip("1.2.3.4"));
    }
    SUBCASE("multiple fields are one list in received order") {
        CHECK(xff("10.0.0.1", {"6.6.6.6", "1.2.3.4", "192.0.2.9"}, trusted) == ip("1.2.3.4"));
        CHECK(xff("10.0.0.1", {"6.6.6.6, 1.2.3.4", "192.0.2.9, 10.2.2.2"}, trusted) == ip("1.2.3.4"));
        CHECK(xff("10.0.0.1", {"1.2.3.4", "6.6.6.6"}, trusted) == ip("6.6.6.6"));
    }
    SUBCASE("every hop trusted: the leftmost") {
        CHECK(xff("10.0.0.1", {"192.0.2.5, 10.9.9.9"}, trusted) == ip("192.0.2.5"));
    }
    SUBCASE("garbage stops the walk at the last trusted hop") {
        CHECK(xff("10.0.0.1", {"garbage"}, trusted) == ip("10.0.0.1"));
        CHECK(xff("10.0.0.1", {"1.2.3.4, garbage"}, trusted) == ip("10.0.0.1"));
        CHECK(xff("10.0.0.1", {"1.2.3.4, garbage, 10.0.0.9"}, trusted) == ip("10.0.0.9"));
        CHECK(xff("10.0.0.1", {"garbage, 1.2.3.4"}, trusted) == ip("1.2.3.4"));  // never reached
        CHECK(xff("10.0.0.1", {"1.2.3.4, 256.1.1.1"}, trusted) == ip("10.0.0.1"));
        CHECK(xff("10.0.0.1", {"1.2.3.4, 01.2.3.4"}, trusted) == ip("10.0.0.1"));
        CHECK(xff("10.0.0.1", {"1.2.3.4, fe80::1%eth0"}, trusted) == ip("10.0.0.1"));
        CHECK(xff("10.0.0.1", {"1.2.3.4, unknown"}, trusted) == ip("10.0.0.1"));
        CHECK(xff("10.0.0.1", {"1.2.3.4, 1.2.3.4 5.6.7.8"}, trusted) == ip("10.0.0.1"));
    }
    SUBCASE("empty elements are ignored") {
        CHECK(xff("10.0.0.1", {"1.2.3.4, , ,"}, trusted) == ip("1.2.3.4"));
        CHECK(xff("10.0.0.1", {""}, trusted) == ip("10.0.0.1"));
    }
    SUBCASE("IPv6, bracketed, ported and IPv4-mapped entries") {
        CHECK(xff("10.0.0.1", {"2001:db8::1"}, trusted) == ip("2001:db8::1"));
        CHECK(xff("10.0.0.1", {"[2001:db8::1]:443"}, trusted) == ip("2001:db8::1"));
        CHECK(xff("10.0.0.1", {"1.2.3.4:5555"}, trusted) == ip("1.2.3.4"));
        const auto a = xff("10.0.0.1", {"::ffff:1.2.3.4"}, trusted);
        CHECK(a == ip("1.2.3.4"));
        CHECK(a.is_v4());
        // A mapped trusted proxy is recognised as trusted.
        CHECK(xff("10.0.0.1", {"5.6.7.8, ::ffff:10.3.3.3"}, trusted) == ip("5.6.7.8"));
        // An IPv6 peer that is trusted.
        const auto t6 = set_of({"2001:db8:aaaa::/48"});
        CHECK(xff("2001:db8:aaaa::1", {"1.2.3.4, 2001:db8:aaaa::2"}, t6) == ip("1.2.3.4"));
        CHECK(xff("::ffff:10.0.0.1", {"1.2.3.4"}, trusted) == ip("1.2.3.4"));
    }
}

TEST_CASE("identity: forwarded_client names the client a check's proxy gives, or none") {
    const auto trusted = set_of({"10.0.0.0/8"});
    const auto named = [&](std::vector<std::string_view> values, std::string_view real_ip = "") {
        const auto a = forwarded_client(values, real_ip, trusted);
        return a ? a->to_string() : std::string("none");
    };
    CHECK(named({"198.51.100.7"}) == "198.51.100.7");
    CHECK(named({"203.0.113.1, 198.51.100.7, 10.0.0.9"}) == "198.51.100.7");  // trusted skipped
    CHECK(named({"203.0.113.1", "198.51.100.7"}) == "198.51.100.7");          // fields read as one list
    CHECK(named({"10.0.0.1, 10.0.0.2"}) == "10.0.0.1");                       // every hop trusted: the leftmost
    CHECK(named({"[2001:db8::1]:443"}) == "2001:db8::1");
    CHECK(named({"::ffff:192.0.2.1"}) == "192.0.2.1");              // normalised
    CHECK(named({"198.51.100.7, garbage"}) == "none");              // the nearest malformed: none
    CHECK(named({"garbage, 10.0.0.9"}) == "10.0.0.9");              // the last trusted hop examined
    CHECK(named({}, " 192.0.2.5 ") == "192.0.2.5");                 // X-Real-IP without X-Forwarded-For
    CHECK(named({" , "}, "192.0.2.5") == "192.0.2.5");              // no entry at all
    CHECK(named({"198.51.100.7"}, "192.0.2.5") == "198.51.100.7");  // X-Forwarded-For first
    CHECK(named({}, "not an address") == "none");
    CHECK(named({}) == "none");
}

TEST_CASE("identity: client_address reads RFC 7239 Forwarded") {
    const auto trusted = set_of({"10.0.0.0/8", "2001:db8:cafe::/48"});
    SUBCASE("quoted IPv6 with port") {
        CHECK(fwd("10.0.0.1", {R"(for="[2001:db8::1]:4711")"}, trusted) == ip("2001:db8::1"));
        CHECK(fwd("10.0.0.1", {R"(for="[2001:db8::1]")"}, trusted) == ip("2001:db8::1"));
    }
    SUBCASE("several elements, other parameters, mixed case") {
        CHECK(fwd("10.0.0.1", {"for=6.6.6.6, For=1.2.3.4;proto=https;by=10.0.0.1, for=10.7.7.7"}, trusted) ==
              ip("1.2.3.4"));
        CHECK(fwd("10.0.0.1", {R"(proto=http; FOR="198.51.100.17:80"; by="[2001:db8:cafe::17]")"}, trusted) ==
              ip("198.51.100.17"));
        CHECK(fwd("10.0.0.1", {"for=1.2.3.4", R"(for="[2001:db8:cafe::9]")"}, trusted) == ip("1.2.3.4"));
        CHECK(fwd("10.0.0.1", {R"(for=1.2.3.4;host="a,b", for=5.6.7.8)"}, trusted) == ip("5.6.7.8"));
        CHECK(fwd("10.0.0.1", {R"(for=5.6.7.8;host="a,b")"}, trusted) == ip("5.6.7.8"));
        CHECK(fwd("10.0.0.1", {"for=\"::ffff:1.2.3.4\""}, trusted) == ip("10.0.0.1"));  // v6 needs brackets
        CHECK(fwd("10.0.0.1", {"for=\"[::ffff:1.2.3.4]\""}, trusted) == ip("1.2.3.4"));
    }
    SUBCASE("unknown, obfuscated and malformed entries stop the walk") {
        CHECK(fwd("10.0.0.1", {"for=1.2.3.4, for=unknown"}, trusted) == ip("10.0.0.1"));
        CHECK(fwd("10.0.0.1", {"for=1.2.3.4, for=_hidden"}, trusted) == ip("10.0.0.1"));
        CHECK(fwd("10.0.0.1", {"for=1.2.3.4, for=\"_hidden\", for=10.5.5.5"}, trusted) == ip("10.5.5.5"));
        CHECK(fwd("10.0.0.1", {"for=1.2.3.4, proto=https"}, trusted) == ip("10.0.0.1"));  // no for=
        CHECK(fwd("10.0.0.1", {"for=1.2.3.4, for=5.6.7.8;for=9.9.9.9"}, trusted) == ip("10.0.0.1"));
        CHECK(fwd("10.0.0.1", {"for=\"1.2.3.4"}, trusted) == ip("10.0.0.1"));  // unterminated
        CHECK(fwd("10.0.0.1", {"for=1.2.3.4, garbage"}, trusted) == ip("10.0.0.1"));
        CHECK(fwd("10.0.0.1", {"1.2.3.4"}, trusted) == ip("10.0.0.1"));  // XFF syntax
        // Garbage to the left of an untrusted hop is never reached.
        CHECK(fwd("10.0.0.1", {"for=unknown, for=1.2.3.4"}, trusted) == ip("1.2.3.4"));
        CHECK(fwd("10.0.0.1", {"for=\"broken", "for=1.2.3.4"}, trusted) == ip("1.2.3.4"));
        // Obfuscated port is fine: the address is what matters.
        CHECK(fwd("10.0.0.1", {R"(for="[2001:db8::2]:_p1")"}, trusted) == ip("2001:db8::2"));
    }
    SUBCASE("every hop trusted: the leftmost") {
        CHECK(fwd("10.0.0.1", {"for=10.1.1.1, for=10.2.2.2"}, trusted) == ip("10.1.1.1"));
    }
}

TEST_CASE("identity: forwarded kind none always answers the peer") {
    const auto trusted = set_of({"10.0.0.0/8"});
    CHECK(client_address(ip("10.0.0.1"), {"1.2.3.4"}, fk::none, trusted) == ip("10.0.0.1"));
    CHECK(client_address(ip("::ffff:10.0.0.1"), {"for=1.2.3.4"}, fk::none, trusted) == ip("10.0.0.1"));
}

TEST_CASE("identity: entry parsers") {
    address a;
    CHECK(parse_xff_entry(" 1.2.3.4 ", a));
    CHECK(a == ip("1.2.3.4"));
    CHECK_FALSE(parse_xff_entry("1.2.3.4:", a));
    CHECK_FALSE(parse_xff_entry("1.2.3.4:123456", a));
    CHECK_FALSE(parse_xff_entry("[1.2.3.4]", a));
    CHECK_FALSE(parse_xff_entry("[2001:db8::1", a));
    CHECK_FALSE(parse_xff_entry("[2001:db8::1]x", a));
    CHECK_FALSE(parse_xff_entry("", a));
    CHECK_FALSE(parse_xff_entry(std::string_view("1.2.3.4\0", 8), a));
    CHECK(parse_forwarded_node("[2001:db8::1]:4711", a));
    CHECK(a == ip("2001:db8::1"));
    CHECK_FALSE(parse_forwarded_node("2001:db8::1", a));
    CHECK_FALSE(parse_forwarded_node("unknown", a));
    CHECK_FALSE(parse_forwarded_node("_hidden", a));
    CHECK_FALSE(parse_forwarded_node("[2001:db8::1]:_", a));
}

TEST_CASE("identity: ip_identifier") {
    CHECK(ip_identifier(ip("203.0.113.9"), 64) == "203.0.113.9");
    CHECK(ip_identifier(ip("::ffff:203.0.113.9"), 64) == "203.0.113.9");
    CHECK(ip_identifier(ip("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), 64) == "2001:db8:1:2::/64");
    CHECK(ip_identifier(ip("2001:db8:1:2::1"), 64) == ip_identifier(ip("2001:db8:1:2:ffff::9"), 64));
    CHECK(ip_identifier(ip("2001:db8:1:2::1"), 64) != ip_identifier(ip("2001:db8:1:3::1"), 64));
    CHECK(ip_identifier(ip("2001:db8:1:2::1"), 128) == "2001:db8:1:2::1");
    CHECK(ip_identifier(ip("2001:db8:1:2::1"), 128) != ip_identifier(ip("2001:db8:1:2::2"), 128));
    CHECK(ip_identifier(ip("2001:db8:1:2::1"), 48) == "2001:db8:1::/48");
    CHECK(ip_identifier(ip("2001:db8:1:2::1"), 48) == ip_identifier(ip("2001:db8:1:ffff::1"), 48));
    CHECK(ip_identifier(ip("2001:db8:1:2::1"), 48) != ip_identifier(ip("2001:db8:2:2::1"), 48));
    CHECK(ip_identifier(ip("2001:db8:1:2::1"), 56) == "2001:db8:1::/56");
    CHECK(ip_identifier(ip("2001:db8:1:1ff::1"), 56) == "2001:db8:1:100::/56");
    CHECK(ip_identifier(ip("2001:db8:1:2::1"), 63) == "2001:db8:1:2::/63");
    CHECK(ip_identifier(ip("2001:db8:1:3::1"), 63) == "2001:db8:1:2::/63");
}

TEST_CASE("identity: hasher") {
    const hasher keyed("s3cret-s3cret-s3cret");
    const hasher other("another-secret");
    const hasher plain("");
    CHECK(keyed.keyed());
    CHECK_FALSE(plain.keyed());

    const auto k = keyed.hash("ip", "1.2.3.4");
    CHECK(k == keyed.hash("ip", "1.2.3.4"));    // stable
    CHECK(k != plain.hash("ip", "1.2.3.4"));    // keyed vs unkeyed
    CHECK(k != other.hash("ip", "1.2.3.4"));    // per secret
    CHECK(k != keyed.hash("user", "1.2.3.4"));  // per kind
    CHECK(k != keyed.hash("ip", "1.2.3.5"));
    CHECK(hasher::to_hex(k).size() == 32);
    CHECK(hasher::to_hex(k).find_first_not_of("0123456789abcdef") == std::string::npos);
    hasher::digest d{};
    d[0] = 0xab;
    d[15] = 0x01;
    CHECK(hasher::to_hex(d) == "ab000000000000000000000000000001");

    // Equal to OpenSSL's own HMAC / SHA-256 of "kind:id", truncated.
    auto reference = [](const std::string& key, const std::string& text) {
        unsigned char out[EVP_MAX_MD_SIZE];
        unsigned len = 0;
        if (key.empty())
            EVP_Digest(text.data(), text.size(), out, &len, EVP_sha256(), nullptr);
        else
            HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
                 reinterpret_cast<const unsigned char*>(text.data()), text.size(), out, &len);
        hasher::digest d{};
        std::copy(out, out + 16, d.begin());
        return d;
    };
    CHECK(k == reference("s3cret-s3cret-s3cret", "ip:1.2.3.4"));
    CHECK(plain.hash("user", "key:abc") == reference("", "user:key:abc"));
    const std::string long_key(100, 'L');  // longer than a block: hashed first
    CHECK(hasher(long_key).hash("ip", "2001:db8::/64") == reference(long_key, "ip:2001:db8::/64"));
    const std::string block_key(64, 'B');
    CHECK(hasher(block_key).hash("ip", "x") == reference(block_key, "ip:x"));

    // Copies and moves hash alike.
    hasher copy = keyed;
    CHECK(copy.hash("ip", "1.2.3.4") == k);
    hasher moved = std::move(copy);
    CHECK(moved.hash("ip", "1.2.3.4") == k);

    // Timing, reported not asserted.
    constexpr int n = 200000;
    std::uint8_t sink = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) sink += keyed.hash("ip", i % 2 ? "2001:db8:1:2::/64" : "203.0.113.9")[0];
    const auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) sink += plain.hash("ip", "203.0.113.9")[0];
    const auto t2 = std::chrono::steady_clock::now();
    auto us = [](auto d) { return std::chrono::duration<double, std::micro>(d).count() / n; };
    MESSAGE("hasher: keyed " << us(t1 - t0) << " us/hash, unkeyed " << us(t2 - t1) << " us/hash (sink " << int(sink)
                             << ")");
}
