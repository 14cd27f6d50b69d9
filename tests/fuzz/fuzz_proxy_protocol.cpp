// The PROXY protocol parser (identity/proxy_protocol.hpp). Input: one byte choosing a cut
// point, then the bytes a connection starts with. Checks the contract whatever the bytes:
// a header never claims more than it was given, needs no byte past itself, re-parses
// identically on its own bytes; a prefix's answer agrees with the whole input's.
#include "check.hpp"
#include "identity/proxy_protocol.hpp"

using namespace sluice;
using fuzz::check;
using identity::parse_proxy_header;
using identity::proxy_error;
using identity::proxy_header;
using identity::proxy_need_more;

namespace {

bool same(const proxy_header& a, const proxy_header& b) {
    return a.cmd == b.cmd && a.version == b.version && a.length == b.length &&
           (a.cmd == proxy_header::command::local || (a.source == b.source && a.source_port == b.source_port));
}

void check_header(std::string_view in, const proxy_header& h) {
    check(h.length <= in.size(), "header longer than its input");
    check(h.length >= 15, "header shorter than the shortest");
    check(h.version == 1 ? h.length <= identity::proxy_v1_max : h.length <= identity::proxy_v2_max,
          "header longer than its version allows");
    if (h.version == 1) check(in.substr(h.length - 2, 2) == "\r\n", "v1 header does not end with CRLF");
    if (h.cmd == proxy_header::command::proxy)
        check(!(h.source.is_v6() && h.source.to_v6().is_v4_mapped()), "source not normalised");
    // Its own bytes alone give the same header: nothing after it was needed.
    const auto alone = parse_proxy_header(in.substr(0, h.length));
    check(std::holds_alternative<proxy_header>(alone) && same(std::get<proxy_header>(alone), h),
          "header re-parses differently on its own bytes");
    // One byte short, it needs exactly a byte more or is still incomplete.
    const auto short_one = parse_proxy_header(in.substr(0, h.length - 1));
    check(std::holds_alternative<proxy_need_more>(short_one), "a header cut short is not incomplete");
    check(h.length - 1 + std::get<proxy_need_more>(short_one).at_least <= h.length, "need_more overshoots");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
    const auto whole = parse_proxy_header(in);
    if (const auto* h = std::get_if<proxy_header>(&whole)) check_header(in, *h);
    if (const auto* m = std::get_if<proxy_need_more>(&whole)) {
        check(m->at_least >= 1, "need_more of nothing");
        check(in.size() + m->at_least <= identity::proxy_v2_max, "need_more past the longest header");
    }
    if (const auto* e = std::get_if<proxy_error>(&whole)) check(!e->reason.empty(), "error without a reason");

    // A prefix (as a reader that took part of the bytes sees them) agrees with the whole.
    const std::size_t cut = in.empty() ? 0 : data[0] % (in.size() + 1);
    const auto part = parse_proxy_header(in.substr(0, cut));
    if (const auto* h = std::get_if<proxy_header>(&part)) {
        check(std::holds_alternative<proxy_header>(whole) && same(*h, std::get<proxy_header>(whole)),
              "a prefix's header differs from the whole input's");
    } else if (std::holds_alternative<proxy_error>(part)) {
        check(std::holds_alternative<proxy_error>(whole), "more bytes undid an error");
    } else {
        const auto need = std::get<proxy_need_more>(part).at_least;
        if (const auto* h = std::get_if<proxy_header>(&whole))
            check(h->length >= cut + need, "need_more asked for bytes past the header");
        if (std::holds_alternative<proxy_need_more>(whole)) check(in.size() >= cut, "shrinking input");
    }
    return 0;
}
