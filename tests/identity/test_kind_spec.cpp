// Tests of identity/kind_spec.hpp and identity/kind.hpp.
#include "identity/hasher.hpp"
#include "identity/kind.hpp"
#include "identity/kind_spec.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstring>
#include <string>
#include <string_view>

using namespace sluice::identity;

namespace {

kind_spec spec(std::string_view text) {
    auto r = parse_kind_spec(text);
    REQUIRE_MESSAGE(r.ok(), r.error);
    return r.spec;
}

std::string error_of(std::string_view text) {
    auto r = parse_kind_spec(text);
    CHECK_FALSE(r.ok());
    return r.error;
}

std::string input_of(const kind_spec& s, std::initializer_list<std::string_view> values) {
    std::string out = "stale";
    s.hash_input(std::span(values.begin(), values.size()), out);
    return out;
}

}  // namespace

TEST_CASE("kind specs: the single kinds and their canonical text") {
    CHECK(spec("ip").text == "ip");
    CHECK(spec("user").text == "user");
    CHECK(spec("route").text == "route");
    const auto h = spec("header:X-Tenant");
    REQUIRE(h.parts.size() == 1);
    CHECK(h.parts[0].what == part_kind::header);
    CHECK(h.parts[0].name == "x-tenant");
    CHECK(h.text == "header:x-tenant");
    CHECK_FALSE(h.composite());
    // Claims and query parameters compare exactly: their names keep their case.
    CHECK(spec("claim:Tenant_ID").text == "claim:Tenant_ID");
    CHECK(spec("claim:https://example.com/tenant").parts[0].name == "https://example.com/tenant");
    CHECK(spec("query:apiKey").text == "query:apiKey");
    CHECK(spec("header:x-tenant") == spec("header:X-TENANT"));
}

TEST_CASE("kind specs: composites keep their written order") {
    const auto c = spec("header:X-Tenant+ip");
    REQUIRE(c.parts.size() == 2);
    CHECK(c.composite());
    CHECK(c.parts[0].what == part_kind::header);
    CHECK(c.parts[1].what == part_kind::ip);
    CHECK(c.text == "header:x-tenant+ip");
    CHECK(spec("ip+header:X-Tenant").text == "ip+header:x-tenant");
    CHECK(spec("route+user+claim:org+query:q").text == "route+user+claim:org+query:q");
    CHECK(spec("header:a+header:b").parts.size() == 2);
    CHECK(spec("claim:a+query:a").parts.size() == 2);
}

TEST_CASE("kind specs: what is refused") {
    CHECK(error_of("").find("an identifier kind is ip") != std::string::npos);
    CHECK(error_of("IP").find("unknown kind \"IP\"") == 0);
    CHECK(error_of("address").find("unknown kind \"address\"") == 0);
    CHECK(error_of("Header:x").find("unknown kind \"Header\"") == 0);
    CHECK(error_of("ip:x") == "ip takes no name");
    CHECK(error_of("route:x") == "route takes no name");
    CHECK(error_of("header") == "header needs a name: header:<name>");
    CHECK(error_of("claim:") == "claim needs a name: claim:<name>");
    CHECK(error_of("header:X Tenant") == "header name \"X Tenant\" is not an HTTP field name");
    CHECK(error_of("header:X:Tenant") == "header name \"X:Tenant\" is not an HTTP field name");
    CHECK(error_of("claim:a%20b").find("has a character other than") != std::string::npos);
    CHECK(error_of("query:a\"b").find("has a character other than") != std::string::npos);
    CHECK(error_of("ip+") == error_of("+ip"));
    CHECK(error_of("ip++user").find("an empty part") == 0);
    CHECK(error_of("ip+ip") == "\"ip\" appears twice");
    CHECK(error_of("header:X-A+user+header:x-a") == "\"header:x-a\" appears twice");
    CHECK(error_of("ip+user+route+header:a+claim:b").find("more than 4 parts") == 0);
    CHECK(error_of("header:" + std::string(129, 'a')).find("longer than 128") != std::string::npos);
    CHECK(parse_kind_spec("header:" + std::string(128, 'a')).ok());
}

TEST_CASE("kind specs: hash inputs: a single part as is, a composite length-prefixed") {
    // ip and user hash exactly what the limiter always has: kind text + ":" + value.
    CHECK(input_of(spec("ip"), {"192.0.2.1"}) == "192.0.2.1");
    CHECK(input_of(spec("user"), {"key:abc"}) == "key:abc");
    CHECK(input_of(spec("header:X-Tenant"), {"acme"}) == "acme");
    const auto c = spec("header:X-Tenant+ip");
    CHECK(input_of(c, {"acme", "192.0.2.1"}) == "4:acme9:192.0.2.1");
    CHECK(input_of(c, {"", "1"}) == "0:1:1");
    // No two combinations share an input, however the values are cut.
    CHECK(input_of(c, {"a+b", "c"}) != input_of(c, {"a", "b+c"}));
    CHECK(input_of(c, {"1:a", "b"}) != input_of(c, {"1", "a1:b"}));

    const hasher h("secret");
    CHECK(h.hash(spec("ip").text, "192.0.2.1") == h.hash("ip", "192.0.2.1"));
    CHECK(h.hash(spec("header:X-Tenant").text, "acme") != h.hash(spec("header:x-other").text, "acme"));
}

TEST_CASE("kind specs: identifiers from an admin path") {
    const auto ok = [](const kind_spec& s, std::string_view raw, unsigned prefix = 64) {
        auto r = identifier_from_path(s, raw, prefix);
        REQUIRE_MESSAGE(r.ok(), r.error);
        return r.hash_input;
    };
    const auto bad = [](const kind_spec& s, std::string_view raw, unsigned prefix = 64) {
        auto r = identifier_from_path(s, raw, prefix);
        CHECK(r.hash_input.empty());
        return r.error;
    };
    // ip: normalised as the limiter does.
    CHECK(ok(spec("ip"), "192.0.2.7") == "192.0.2.7");
    CHECK(ok(spec("ip"), "::ffff:192.0.2.7") == "192.0.2.7");
    CHECK(ok(spec("ip"), "2001:db8:1:2:3:4:5:6") == "2001:db8:1:2::/64");
    CHECK(ok(spec("ip"), "2001:db8:1:2::%2F64") == "2001:db8:1:2::/64");
    CHECK(ok(spec("ip"), "2001:db8:1:2::/64") == "2001:db8:1:2::/64");
    CHECK(ok(spec("ip"), "2001:db8::1", 128) == "2001:db8::1");
    CHECK(bad(spec("ip"), "2001:db8:1:2::/48") == "ip value \"2001:db8:1:2::/48\": clients.ipv6_prefix is 64");
    CHECK(bad(spec("ip"), "192.0.2.7/32") == "ip value \"192.0.2.7/32\": an IPv4 address takes no prefix");
    CHECK(bad(spec("ip"), "example.com") == "ip value \"example.com\" is not an IP address");
    CHECK(bad(spec("ip"), "1.2.3.4/x") == "ip value \"1.2.3.4/x\": bad prefix length");
    // user: the caller's user string.
    CHECK(ok(spec("user"), "key:abc%2Bdef") == "key:abc+def");
    CHECK(ok(spec("user"), "key:abc+def") == "key:abc+def");  // one part: '+' is the value's
    CHECK(ok(spec("user"), "user:alice") == "user:alice");
    CHECK(ok(spec("user"), "jwt:sub-1") == "jwt:sub-1");
    CHECK(ok(spec("user"), "cert:client.example") == "cert:client.example");
    CHECK(bad(spec("user"), "alice").find("is not \"key:<api key>\"") != std::string::npos);
    CHECK(bad(spec("user"), "key:").find("is not") != std::string::npos);
    // Others: the value as the request carried it.
    CHECK(ok(spec("header:X-Tenant"), "acme%20corp") == "acme corp");
    CHECK(ok(spec("route"), "%2Fapi%2Fv1") == "/api/v1");
    CHECK(bad(spec("header:X-Tenant"), "") == "header:x-tenant value is empty");
    CHECK(bad(spec("query:q"), "a%2") == "query:q value: bad percent-encoding");
    CHECK(bad(spec("query:q"), "a%zz") == "query:q value: bad percent-encoding");
    // Composites: split on '+', then decoded; the input is what the limiter hashes.
    const auto c = spec("header:X-Tenant+ip");
    CHECK(ok(c, "acme+192.0.2.7") == "4:acme9:192.0.2.7");
    CHECK(ok(c, "a%2Bb+192.0.2.7") == "3:a+b9:192.0.2.7");
    CHECK(bad(c, "acme").find("is 2 values joined by '+'") != std::string::npos);
    CHECK(bad(c, "a+b+192.0.2.7").find("not 3") != std::string::npos);
    CHECK(bad(c, "+192.0.2.7") == "header:x-tenant value is empty");
    CHECK(bad(c, "acme+nope") == "ip value \"nope\" is not an IP address");
}

TEST_CASE("kinds: one text is one kind for the process's life") {
    CHECK(kind_of("ip") == kind::ip);
    CHECK(kind_of("user") == kind::user);
    CHECK(kind_of("upstream") == kind::upstream);
    CHECK(std::strcmp(to_string(kind::ip), "ip") == 0);
    CHECK(std::strcmp(to_string(kind::user), "user") == 0);
    CHECK(std::strcmp(to_string(kind::upstream), "upstream") == 0);
    const kind a = kind_of("header:x-kind-test");
    const kind b = kind_of("header:x-kind-test+ip");
    CHECK(a != b);
    CHECK(a != kind::ip);
    CHECK(kind_of("header:x-kind-test") == a);
    CHECK(std::strcmp(to_string(a), "header:x-kind-test") == 0);
    CHECK(std::strcmp(to_string(b), "header:x-kind-test+ip") == 0);
    CHECK(std::strcmp(to_string(static_cast<kind>(max_kinds - 1)), "") == 0);
    CHECK(std::strcmp(to_string(static_cast<kind>(max_kinds + 5)), "") == 0);
}
