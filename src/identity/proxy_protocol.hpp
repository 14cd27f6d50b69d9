// The PROXY protocol header (HAProxy's, versions 1 and 2) a load balancer sends before
// anything else on a connection: who the client really is. I/O-free: bytes in, one of
// three answers out, so the reader on the socket (server/proxy_header) and the tests
// share one parser.
//
// Contract: parse_proxy_header(bytes) looks at the start of a connection's bytes.
//   - need_more: every byte given may begin a valid header, and the header is at least
//     `at_least` bytes more: a reader may consume all the bytes it gave (they are all
//     header bytes if the header turns out valid), then wait for more.
//   - proxy_header: a whole, valid header; `length` bytes (<= the input's size) are the
//     header, and what follows them is the client's own first bytes (HTTP or TLS).
//   - proxy_error: not a valid header (or its start); `reason` is a short static text.
// Version 1: "PROXY TCP4|TCP6 <src> <dst> <sport> <dport>\r\n" or "PROXY UNKNOWN...\r\n",
// at most 107 bytes; fields separated by one space, ports decimal 0-65535 without leading
// zeros, addresses of the named family. Version 2: the 12-byte signature, version 2, the
// command LOCAL or PROXY, the family, the length, the addresses and TLVs (skipped, but
// they must fill the rest exactly). UNKNOWN (v1), LOCAL, and the v2 families UNSPEC and
// UNIX are answered as command::local: no source, the connection's own peer stays the
// client. Never reads past the end of its input. Any thread; no allocation.
#pragma once

#include "identity/address.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <variant>

namespace sluice::identity {

struct proxy_need_more {
    std::size_t at_least = 1;  // more bytes the header needs, at least
};

struct proxy_header {
    enum class command { proxy, local };
    command cmd = command::local;
    int version = 1;                // 1 (text) or 2 (binary)
    address source;                 // command::proxy only
    std::uint16_t source_port = 0;  // command::proxy only
    std::size_t length = 0;         // the header's bytes, CRLF or TLVs included
};

struct proxy_error {
    std::string_view reason;
};

using proxy_parse = std::variant<proxy_need_more, proxy_header, proxy_error>;

inline constexpr std::size_t proxy_v1_max = 107;         // CRLF included
inline constexpr std::size_t proxy_v2_prefix = 16;       // signature, version/command, family, length
inline constexpr std::size_t proxy_v2_max = 16 + 65535;  // the longest v2 header
inline constexpr std::string_view proxy_v1_signature = "PROXY ";
inline constexpr std::string_view proxy_v2_signature{"\r\n\r\n\0\r\nQUIT\n", 12};

proxy_parse parse_proxy_header(std::string_view bytes);

}  // namespace sluice::identity
