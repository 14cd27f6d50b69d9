// Client-address resolution from X-Forwarded-For and Forwarded (identity/address.hpp).
// Input: one byte choosing the trusted set, the peer and the header kind, then the field
// values, one per line. Checks the contract's rules that hold whatever the values are.
#include "check.hpp"
#include "identity/address.hpp"

using namespace sluice;
using fuzz::check;
using identity::address;
using kind = config::clients_config::forwarded_kind;

namespace {

config::cidr net(const char* a, unsigned prefix) { return {boost::asio::ip::make_address(a), prefix}; }

const identity::cidr_set trusted_sets[] = {
    identity::cidr_set({net("127.0.0.0", 8), net("::1", 128)}),
    identity::cidr_set({net("10.0.0.0", 8), net("2001:db8::", 32)}),
    identity::cidr_set({net("::ffff:10.0.0.0", 104), net("fd00::", 8)}),
    identity::cidr_set({net("0.0.0.0", 0), net("fd00::", 8)}),
};
const char* const peers[] = {"127.0.0.1", "::1", "10.1.2.3", "::ffff:10.1.2.3", "2001:db8::7", "198.51.100.1"};

void check_result(const address& a) {
    check(!(a.is_v6() && a.to_v6().is_v4_mapped()), "result not normalised");
    check(boost::asio::ip::make_address(identity::ip_identifier(a, 128)) == a, "ip_identifier /128 round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const auto& trusted = trusted_sets[data[0] & 3];
    const address peer = boost::asio::ip::make_address(peers[((data[0] >> 2) & 7) % 6]);
    const kind k = data[0] & 0x20 ? kind::forwarded : kind::x_forwarded_for;
    std::vector<std::string_view> values;
    std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
    while (!rest.empty() && values.size() < 8) {
        const auto nl = rest.find('\n');
        values.push_back(rest.substr(0, nl));
        rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    }

    const address got = identity::client_address(peer, values, k, trusted);
    check_result(got);
    const address norm_peer = identity::normalize(peer);
    if (!trusted.contains(peer)) check(got == norm_peer, "an untrusted peer chose its address");
    check(identity::client_address(peer, values, kind::none, trusted) == norm_peer, "kind none ignored the peer");

    address a;
    for (auto v : values) {
        if (k == kind::x_forwarded_for && identity::parse_xff_entry(v, a)) check_result(a);
        if (k == kind::forwarded && identity::parse_forwarded_node(v, a)) {
            check_result(a);
            check(v.find('[') != std::string_view::npos || a.is_v4(), "unbracketed IPv6 node accepted");
        }
    }
    if (k == kind::x_forwarded_for) {  // the values are one list: joining them changes nothing
        std::string joined;
        for (auto v : values) joined.append(joined.empty() ? "" : ",").append(v);
        check(identity::client_address(peer, {joined}, k, trusted) == got, "XFF joined differs");
    }
    if (!trusted.contains(peer)) return 0;
    // The walk starts at the rightmost entry of the last value.
    const bool fwd = k == kind::forwarded;
    auto with = [&](std::string_view last) {
        auto v = values;
        v.push_back(last);
        return identity::client_address(peer, v, k, trusted);
    };
    check(with(fwd ? "for=198.51.100.7" : "198.51.100.7") == boost::asio::ip::make_address("198.51.100.7") ||
              trusted.contains(boost::asio::ip::make_address("198.51.100.7")),
          "an untrusted last hop is not the client");
    check(with(fwd ? "for=\"[2a00::7]:80\"" : "[2a00::7]:80") == boost::asio::ip::make_address("2a00::7"),
          "an untrusted last IPv6 hop is not the client");
    check(with(fwd ? "for=unknown" : "unknown") == norm_peer, "a malformed last hop did not stop the walk");
    check(with(" , ,\t") == got, "empty list elements changed the result");
    return 0;
}
