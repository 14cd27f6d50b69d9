// The PROXY protocol parser (identity/proxy_protocol.hpp): v1 and v2 headers into the
// source address, a need for more bytes, or a refusal; never a byte past the header.
#include "identity/proxy_protocol.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>

namespace {

namespace identity = sluice::identity;
using identity::parse_proxy_header;
using identity::proxy_error;
using identity::proxy_header;
using identity::proxy_need_more;
using command = proxy_header::command;
using namespace std::string_literals;

identity::address ip(const char* s) { return boost::asio::ip::make_address(s); }

proxy_header header_of(std::string_view b) {
    auto r = parse_proxy_header(b);
    if (auto* e = std::get_if<proxy_error>(&r)) FAIL_CHECK("refused: " << e->reason);
    REQUIRE(std::holds_alternative<proxy_header>(r));
    return std::get<proxy_header>(r);
}

std::string_view error_of(std::string_view b) {
    auto r = parse_proxy_header(b);
    REQUIRE_MESSAGE(std::holds_alternative<proxy_error>(r), "not refused: " << std::string(b));
    return std::get<proxy_error>(r).reason;
}

std::size_t need_of(std::string_view b) {
    auto r = parse_proxy_header(b);
    if (auto* e = std::get_if<proxy_error>(&r)) FAIL_CHECK("refused: " << e->reason);
    REQUIRE(std::holds_alternative<proxy_need_more>(r));
    return std::get<proxy_need_more>(r).at_least;
}

// Every proper prefix of a valid header asks for more, and never for more than it lacks.
void check_prefixes(std::string_view whole) {
    for (std::size_t n = 0; n < whole.size(); ++n) {
        CAPTURE(n);
        const auto need = need_of(whole.substr(0, n));
        CHECK(need >= 1);
        CHECK(n + need <= whole.size());
    }
}

// A v2 header: version/command byte, family byte, then the body (its length is computed).
std::string v2(unsigned char ver_cmd, unsigned char fam, const std::string& body) {
    std::string h(identity::proxy_v2_signature);
    h += static_cast<char>(ver_cmd);
    h += static_cast<char>(fam);
    h += static_cast<char>(body.size() >> 8);
    h += static_cast<char>(body.size() & 0xff);
    return h + body;
}

// 203.0.113.7:51234 -> 192.0.2.1:443
const std::string inet_body = "\xcb\x00\x71\x07\xc0\x00\x02\x01\xc8\x22\x01\xbb"s;
// [2001:db8::7]:8080 -> [2001:db8::1]:443
const std::string inet6_body =
    "\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x07"
    "\x20\x01\x0d\xb8\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"
    "\x1f\x90\x01\xbb"s;

}  // namespace

TEST_CASE("proxy v1: TCP4, TCP6 and UNKNOWN, and the bytes after the header are not its") {
    const std::string tcp4 = "PROXY TCP4 203.0.113.7 192.0.2.1 51234 443\r\n";
    auto h = header_of(tcp4 + "GET / HTTP/1.1\r\n");
    CHECK(h.version == 1);
    CHECK(h.cmd == command::proxy);
    CHECK(h.source == ip("203.0.113.7"));
    CHECK(h.source_port == 51234);
    CHECK(h.length == tcp4.size());
    check_prefixes(tcp4);

    const std::string tcp6 = "PROXY TCP6 2001:db8::7 2001:DB8::1 0 65535\r\n";
    h = header_of(tcp6 + "\x16\x03\x01");  // a TLS ClientHello follows
    CHECK(h.source == ip("2001:db8::7"));
    CHECK(h.source_port == 0);
    CHECK(h.length == tcp6.size());
    check_prefixes(tcp6);
    // A v4-mapped source is the IPv4 client.
    CHECK(header_of("PROXY TCP6 ::ffff:10.1.2.3 ::1 1 2\r\n").source == ip("10.1.2.3"));

    for (const std::string unknown :
         {"PROXY UNKNOWN\r\n", "PROXY UNKNOWN ffff:: ffff:: 1 2\r\n", "PROXY UNKNOWN whatever the sender had\r\n"}) {
        h = header_of(unknown + "GET");
        CHECK(h.cmd == command::local);
        CHECK(h.length == unknown.size());
        check_prefixes(unknown);
    }
}

TEST_CASE("proxy v1: the longest line is 107 bytes, CRLF included") {
    // The longest TCP6 line (104 bytes), and the spec's worst case: UNKNOWN with the same fields.
    const std::string fields =
        "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    CHECK(header_of("PROXY TCP6 " + fields).length == 104);
    CHECK(header_of("PROXY UNKNOWN " + fields).length == 107);
    const std::string unknown_107 = "PROXY UNKNOWN " + std::string(107 - 16, 'x') + "\r\n";
    REQUIRE(unknown_107.size() == 107);
    CHECK(header_of(unknown_107).length == 107);
    const std::string unknown_108 = "PROXY UNKNOWN " + std::string(108 - 16, 'x') + "\r\n";
    CHECK(error_of(unknown_108) == "v1: no CRLF within 107 bytes");
    CHECK(error_of(unknown_108.substr(0, 107)) == "v1: no CRLF within 107 bytes");
    CHECK(error_of(std::string(unknown_108.substr(0, 106)) + "\r") == "v1: no CRLF within 107 bytes");
    CHECK(need_of(unknown_108.substr(0, 106)) == 1);
}

TEST_CASE("proxy v1: malformed lines are refused") {
    for (const char* bad : {
             "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",          // LF without CR
             "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX",         // CR without LF
             "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n",       // trailing space
             "PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n",       // two spaces
             "PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n",       // two spaces
             "PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n",       // two spaces
             "PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",          // a port missing
             "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",      // a field too many
             "PROXY TCP4\r\n",                            // no fields
             "PROXY \r\n",                                // nothing
             "PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n",        // unknown protocol
             "PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n",        // protocol case
             "PROXY UNKNOWNX\r\n",                        // not UNKNOWN
             "PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n",    // port out of range
             "PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n",    // port out of range
             "PROXY TCP4 1.2.3.4 5.6.7.8 0080 2\r\n",     // leading zero
             "PROXY TCP4 1.2.3.4 5.6.7.8 00 2\r\n",       // leading zero
             "PROXY TCP4 1.2.3.4 5.6.7.8 +1 2\r\n",       // sign
             "PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n",       // sign
             "PROXY TCP4 1.2.3.4 5.6.7.8 1a 2\r\n",       // not decimal
             "PROXY TCP4 1.2.3.04 5.6.7.8 1 2\r\n",       // leading zero in an octet
             "PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n",          // three octets
             "PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n",      // octet out of range
             "PROXY TCP4 1.2.3.4 5.6.7.8\t1 2\r\n",       // a tab
             "PROXY TCP4 ::1 5.6.7.8 1 2\r\n",            // family mismatch
             "PROXY TCP4 1.2.3.4 ::1 1 2\r\n",            // family mismatch
             "PROXY TCP6 1.2.3.4 ::1 1 2\r\n",            // family mismatch
             "PROXY TCP6 ::1 1.2.3.4 1 2\r\n",            // family mismatch
             "PROXY TCP6 [::1] ::1 1 2\r\n",              // brackets
             "PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n",       // zone id
             "PROXY TCP6 1:2:3:4:5:6:7:8:9 ::1 1 2\r\n",  // nine groups
             "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\r\n",      // CR CR LF
         }) {
        CAPTURE(bad);
        error_of(bad);
    }
    CHECK(error_of(std::string("PROXY TCP4 1.2.3.4\0 5.6.7.8 1 2\r\n", 33)).starts_with("v1:"));  // a NUL
}

TEST_CASE("proxy: a bad signature is refused at its first wrong byte") {
    CHECK(error_of("GET / HTTP/1.1\r\n") == "no PROXY header: bad signature");
    CHECK(error_of("PROXX") == "no PROXY header: bad signature");
    CHECK(error_of("proxy TCP4") == "no PROXY header: bad signature");
    CHECK(error_of("\x16\x03\x01\x02\x00") == "no PROXY header: bad signature");  // TLS without a header
    CHECK(error_of("\r\n\r\n\x00\r\nQUIX"s) == "no PROXY header: bad signature");
    CHECK(error_of("\r\n\r\n\x01"s) == "no PROXY header: bad signature");
    CHECK(need_of("") == 15);
    CHECK(need_of("PRO") == 12);
    CHECK(need_of("\r\n\r\n"s) == 12);
}

TEST_CASE("proxy v2: PROXY over IPv4 and IPv6, with and without TLVs") {
    auto h4 = v2(0x21, 0x11, inet_body);
    auto h = header_of(h4 + "GET / HTTP/1.1\r\n");
    CHECK(h.version == 2);
    CHECK(h.cmd == command::proxy);
    CHECK(h.source == ip("203.0.113.7"));
    CHECK(h.source_port == 51234);
    CHECK(h.length == 28);
    check_prefixes(h4);

    auto h6 = v2(0x21, 0x21, inet6_body);
    h = header_of(h6 + "\x16\x03\x01");
    CHECK(h.source == ip("2001:db8::7"));
    CHECK(h.source_port == 8080);
    CHECK(h.length == 16 + 36);
    check_prefixes(h6);

    // TLVs: ALPN "h2", an empty NOOP, and an AWS-style one, skipped whole.
    const std::string tlvs = "\x01\x00\x02h2\x04\x00\x00\xea\x00\x05\x01vpce"s;
    auto with_tlvs = v2(0x21, 0x11, inet_body + tlvs);
    h = header_of(with_tlvs + "GET");
    CHECK(h.source == ip("203.0.113.7"));
    CHECK(h.length == 16 + 12 + tlvs.size());
    check_prefixes(with_tlvs);

    // A v4-mapped IPv6 source is the IPv4 client.
    auto mapped = inet6_body;
    mapped.replace(0, 16, "\0\0\0\0\0\0\0\0\0\0\xff\xff\x0a\x01\x02\x03"s);
    CHECK(header_of(v2(0x21, 0x21, mapped)).source == ip("10.1.2.3"));
}

TEST_CASE("proxy v2: LOCAL, UNSPEC and UNIX keep the connection's own peer") {
    for (const auto& [name, bytes] : std::initializer_list<std::pair<const char*, std::string>>{
             {"LOCAL, no addresses", v2(0x20, 0x00, "")},
             {"LOCAL with INET addresses", v2(0x20, 0x11, inet_body)},
             {"LOCAL ignores even a family that does not exist", v2(0x20, 0xff, "xyz")},
             {"LOCAL with a short INET block", v2(0x20, 0x11, "abc")},
             {"PROXY UNSPEC", v2(0x21, 0x00, "")},
             {"PROXY UNSPEC with junk", v2(0x21, 0x00, "junk")},
             {"PROXY UNIX stream", v2(0x21, 0x31, std::string(216, 'u'))},
             {"PROXY UNIX dgram", v2(0x21, 0x32, std::string(216, 'u'))},
         }) {
        CAPTURE(name);
        auto h = header_of(bytes + "GET /");
        CHECK(h.cmd == command::local);
        CHECK(h.version == 2);
        CHECK(h.length == bytes.size());
        check_prefixes(bytes);
    }
}

TEST_CASE("proxy v2: malformed headers are refused") {
    CHECK(error_of(v2(0x11, 0x11, inet_body)) == "v2: bad version");
    CHECK(error_of(v2(0x31, 0x11, inet_body)) == "v2: bad version");
    CHECK(error_of(v2(0x01, 0x11, inet_body)) == "v2: bad version");
    CHECK(error_of(v2(0x22, 0x11, inet_body)) == "v2: bad command");
    CHECK(error_of(v2(0x2f, 0x11, inet_body)) == "v2: bad command");
    CHECK(error_of(v2(0x21, 0x41, inet_body)) == "v2: bad address family");
    CHECK(error_of(v2(0x21, 0x13, inet_body)) == "v2: bad transport protocol");
    CHECK(error_of(v2(0x21, 0x12, inet_body)) == "v2: an IP source must be STREAM");
    CHECK(error_of(v2(0x21, 0x10, inet_body)) == "v2: an IP source must be STREAM");
    CHECK(error_of(v2(0x21, 0x11, inet_body.substr(0, 11))) == "v2: length too short for the address family");
    CHECK(error_of(v2(0x21, 0x21, inet_body)) == "v2: length too short for the address family");
    CHECK(error_of(v2(0x21, 0x11, "")) == "v2: length too short for the address family");
    // Refused from the 16-byte prefix alone, before the rest arrives.
    CHECK(error_of(v2(0x21, 0x11, inet_body.substr(0, 11)).substr(0, 16)) ==
          "v2: length too short for the address family");
    CHECK(error_of(v2(0x22, 0x11, inet_body).substr(0, 16)) == "v2: bad command");
    // TLVs that do not fill the rest exactly.
    CHECK(error_of(v2(0x21, 0x11, inet_body + "\x01"s)) == "v2: truncated TLV");
    CHECK(error_of(v2(0x21, 0x11, inet_body + "\x01\x00"s)) == "v2: truncated TLV");
    CHECK(error_of(v2(0x21, 0x11, inet_body + "\x01\x00\x03h2"s)) == "v2: TLV overruns the header");
    CHECK(error_of(v2(0x21, 0x11, inet_body + "\x01\xff\xff"s)) == "v2: TLV overruns the header");
}

TEST_CASE("proxy v2: a truncated header asks for exactly what its length says") {
    const auto h = v2(0x21, 0x11, inet_body + std::string(1000, '\x04').replace(0, 3, "\x04\x03\xe5"s));
    REQUIRE(h.size() == 16 + 12 + 1000);
    CHECK(header_of(h).length == h.size());
    CHECK(need_of(h.substr(0, 16)) == 1012);
    CHECK(need_of(h.substr(0, 500)) == h.size() - 500);
    CHECK(need_of(h.substr(0, h.size() - 1)) == 1);
    // The longest header: 65535 bytes after the prefix.
    const auto longest = v2(0x20, 0x00, std::string(65535, 'x'));
    CHECK(header_of(longest).length == identity::proxy_v2_max);
    CHECK(need_of(longest.substr(0, 16)) == 65535);
}
