// Client address resolution: normalisation, CIDR sets, forwarding headers, and the
// rate-limiting identifier of an address. Pure functions over values; no sockets.
#pragma once

#include "config/config.hpp"

#include <boost/asio/ip/address.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::identity {

using address = boost::asio::ip::address;

// IPv4-mapped IPv6 (::ffff:a.b.c.d) becomes IPv4; anything else is returned unchanged.
// Any thread.
address normalize(const address& a);

// A set of IPv4 and IPv6 networks.
//
// Contract: built once from config networks; contains() normalises its argument first
// and then compares only within the same family (an IPv4 address never matches an IPv6
// network such as ::/0). A configured IPv4-mapped network (::ffff:10.0.0.0/104) is stored
// as its IPv4 equivalent (10.0.0.0/8). contains() is a linear scan, fine for tens of
// networks. Thread: construct anywhere; any number of threads may call the const
// members concurrently.
class cidr_set {
public:
    cidr_set() = default;
    explicit cidr_set(const std::vector<config::cidr>& nets);

    bool contains(const address& a) const;
    bool empty() const { return v4_.empty() && v6_.empty(); }
    std::size_t size() const { return v4_.size() + v6_.size(); }

private:
    struct net4 {
        std::uint32_t network;
        std::uint32_t mask;
    };
    struct net6 {
        std::uint64_t network_hi, network_lo;
        std::uint64_t mask_hi, mask_lo;
    };
    std::vector<net4> v4_;
    std::vector<net6> v6_;
};

// The client's address.
//
// `peer` is the TCP peer. If the (normalised) peer is not in `trusted`, the answer is the
// peer: a client outside cannot choose its own address. Otherwise the forwarding header
// is walked from the right: `header_values` are every field value of X-Forwarded-For (or
// of Forwarded) in received order, read as one list. Addresses in `trusted` are skipped;
// the first untrusted one is the client. If every hop is trusted, the leftmost one. A
// malformed entry stops the walk and the answer is the last trusted hop examined (or the
// peer). Empty list elements (", ,") are ignored, as RFC 9110 lists allow.
//
// X-Forwarded-For entries: an IP literal, optionally "[v6]", "[v6]:port" or "v4:port".
// Forwarded (RFC 7239): each element's for= parameter (name case-insensitive, value a
// token or quoted-string): "1.2.3.4", "1.2.3.4:80", "[2001:db8::1]", "[2001:db8::1]:4711".
// "unknown", obfuscated identifiers ("_hidden"), an element without for=, a repeated
// for= and any syntax error (e.g. an unterminated quote, which leaves the rest of that
// field undelimitable) count as malformed. kind none → always the peer.
// Every returned address is normalised. Any thread; no exceptions.
address client_address(const address& peer, const std::vector<std::string_view>& header_values,
                       config::clients_config::forwarded_kind kind, const cidr_set& trusted);

// The client a proxy names when it asks the HTTP check (its peer is trusted by
// service.http_peers): the X-Forwarded-For values walked from the right as client_address()
// walks them, trusted addresses skipped; without an entry, X-Real-IP's address. nullopt:
// no address given, or the nearest one malformed. Normalised. Any thread; no exceptions.
std::optional<address> forwarded_client(const std::vector<std::string_view>& xff_values, std::string_view real_ip,
                                        const cidr_set& trusted);

// Parses one X-Forwarded-For entry / one Forwarded for= node (already unquoted).
// Exposed for tests. Returns false on anything malformed. Any thread.
bool parse_xff_entry(std::string_view s, address& out);
bool parse_forwarded_node(std::string_view s, address& out);

// Identifier text for rate limiting: IPv4 as a dotted quad; IPv6 masked to `ipv6_prefix`
// bits (clamped to 1..128) written "2001:db8:1:2::/64"; a /128 prefix writes just the
// address. The address is normalised first. Any thread.
std::string ip_identifier(const address& a, unsigned ipv6_prefix);

}  // namespace sluice::identity
