// The service section's HTTP check keys: service.http_listen (off by default) and
// service.http_peers (loopback by default), every bad value at its key
// (FILE:LINE:COLUMN: key.path: reason).
#include <doctest/doctest.h>

#include <string>

#include "config/config.hpp"
#include "load_error.hpp"

namespace cfg = sluice::config;
using sluice::config::testing::error_of;

namespace {

std::string yaml(const std::string& service) { return "upstream: {url: 'http://h'}\nservice:\n" + service; }

std::string peers_of(const cfg::config& c) {
    std::string out;
    for (const auto& p : c.service.http_peers) out += p.network.to_string() + "/" + std::to_string(p.prefix) + " ";
    return out;
}

}  // namespace

TEST_CASE("service: the HTTP check is off unless http_listen is set, and asked from loopback by default") {
    const auto none = cfg::load_string("upstream: {url: 'http://h'}\n", "inline.yaml");
    CHECK_FALSE(none->service.http_listen);
    CHECK(peers_of(*none) == "127.0.0.0/8 ::1/128 ");

    const auto on = cfg::load_string(yaml("  http_listen: '127.0.0.1:8082'\n"), "inline.yaml");
    REQUIRE(on->service.http_listen);
    CHECK(on->service.http_listen->to_string() == "127.0.0.1:8082");

    const auto off = cfg::load_string(yaml("  http_listen: off\n"), "inline.yaml");
    CHECK_FALSE(off->service.http_listen);

    const auto peers = cfg::load_string(
        yaml("  http_listen: '[::]:8082'\n  http_peers: ['10.1.0.0/16', '192.0.2.7']\n"), "inline.yaml");
    CHECK(peers->service.http_listen->to_string() == "[::]:8082");
    CHECK(peers_of(*peers) == "10.1.0.0/16 192.0.2.7/32 ");
}

TEST_CASE("service: a bad value is an error at its key") {
    CHECK(error_of(yaml("  http_listen: localhost:8082\n")) ==
          "inline.yaml:3:16: service.http_listen: host must be an IP address");
    CHECK(error_of(yaml("  http_listen: 8082\n")) ==
          R"(inline.yaml:3:16: service.http_listen: expected an address like "0.0.0.0:8080" or "[::1]:8080")");
    CHECK(error_of(yaml("  http_peers: []\n")) == "inline.yaml:3:15: service.http_peers: must not be empty");
    CHECK(error_of(yaml("  http_peers: ['10.0.0.1/8']\n")).rfind("inline.yaml:3:16: service.http_peers[0]: ", 0) == 0);
    CHECK(error_of(yaml("  http_peers: 10.0.0.0/8\n")) == "inline.yaml:3:15: service.http_peers: expected a list");
    CHECK(error_of(yaml("  grpc_listn: '127.0.0.1:1'\n")) == "inline.yaml:3:3: service.grpc_listn: unknown key");
}
