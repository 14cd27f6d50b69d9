// response_parser as session.cpp drives it: interim 1xx responses, then the final one,
// optionally as the answer to HEAD; parsed once whole and once split at fuzz-chosen
// points. Checks the framing rules and that both runs agree on every complete response.
#include "feed.hpp"

#include <boost/beast/core/string.hpp>

using namespace sluice;
using fuzz::check;
namespace bhttp = boost::beast::http;

namespace {

void check_head(const fuzz::feeder<false>& f) {
    const auto& h = f.head;
    check(h.version == 10 || h.version == 11, "version other than 1.0/1.1");
    check(h.status >= 100 && h.status <= 999, "status out of range");
    const auto te = h.count(bhttp::field::transfer_encoding);
    check(te <= 1, "two Transfer-Encoding fields accepted");
    if (te == 1)
        check(boost::beast::iequals(h.find(bhttp::field::transfer_encoding), "chunked") &&
                  h.count(bhttp::field::content_length) == 0,
              "Transfer-Encoding other than exactly chunked accepted");
    check(!f.p->chunked() || te == 1, "chunked without Transfer-Encoding");
}

fuzz::transcript parse(const std::vector<std::string_view>& pieces, bool head_request) {
    fuzz::feeder<false> f;
    f.skip_body = head_request;
    return fuzz::drive(f, pieces, check_head, [&](const fuzz::feeder<false>& done) {
        const unsigned status = done.head.status;
        const bool no_body = head_request || status / 100 == 1 || status == 204 || status == 304;
        check(!no_body || done.out.empty(), "a body where none is allowed");
        if (const auto len = done.p->content_length(); len && !no_body)
            check(done.out.size() == *len, "body length != Content-Length");
        return status / 100 == 1 && status != 101;  // an interim response: the final one follows
    });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view input(reinterpret_cast<const char*>(data), size);
    const bool head_request = !input.empty() && (input[0] & 0x80);  // take_pieces reads the low bits
    const auto pieces = fuzz::take_pieces(input);
    fuzz::check_agree(parse({input}, head_request), parse(pieces, head_request));
    return 0;
}
