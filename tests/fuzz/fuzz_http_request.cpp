// request_parser as session.cpp drives it: up to three pipelined requests, parsed once
// whole and once split at fuzz-chosen points. Checks the framing rules on every accepted
// head and that both runs agree on every complete message.
#include "feed.hpp"

#include <boost/beast/core/string.hpp>

using namespace sluice;
using fuzz::check;
namespace bhttp = boost::beast::http;

namespace {

void check_head(const fuzz::feeder<true>& f) {
    const auto& h = f.head;
    const auto& p = *f.p;
    check(h.version == 10 || h.version == 11, "version other than 1.0/1.1");
    if (h.method != bhttp::verb::unknown) check(bhttp::to_string(h.method) == h.method_text(), "verb/text mismatch");
    const auto te = h.count(bhttp::field::transfer_encoding);
    const bool has_length = h.count(bhttp::field::content_length) > 0;
    check(te <= 1, "two Transfer-Encoding fields accepted");
    if (te == 1)
        check(boost::beast::iequals(h.find(bhttp::field::transfer_encoding), "chunked") && !has_length && p.chunked(),
              "Transfer-Encoding other than exactly chunked accepted");
    check(!p.chunked() || (te == 1 && p.framing() == http::framing_error::none), "chunked with bad framing");
    check(!p.content_length() || te == 0, "Content-Length and Transfer-Encoding both accepted");
}

fuzz::transcript parse(const std::vector<std::string_view>& pieces) {
    fuzz::feeder<true> f;
    int messages = 0;
    return fuzz::drive(f, pieces, check_head, [&](const fuzz::feeder<true>& done) {
        if (const auto len = done.p->content_length()) check(done.out.size() == *len, "body length != Content-Length");
        check(done.sink.bytes == done.out.size(), "sink byte count");
        return ++messages < 3 && done.p->keep_alive();
    });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view input(reinterpret_cast<const char*>(data), size);
    const auto pieces = fuzz::take_pieces(input);
    fuzz::check_agree(parse({input}), parse(pieces));
    return 0;
}
