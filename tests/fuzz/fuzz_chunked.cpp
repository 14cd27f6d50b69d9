// The chunked decoder: a fixed chunked request head, then fuzz bytes as the body.
// Decoding must not depend on how the bytes arrive (whole vs. split at fuzz-chosen
// points), and body_sink's re-chunked output must decode back to the same bytes.
#include "feed.hpp"

using namespace sluice;
using fuzz::check;

namespace {

constexpr std::string_view head = "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";

struct result {
    std::string out, rest;
    boost::beast::error_code ec;
    bool done = false;
};

result decode(const std::vector<std::string_view>& pieces, fuzz::framing mode) {
    fuzz::feeder<true> f;
    f.body_mode = mode;
    f.restart();
    bool stopped = false;
    for (auto piece : pieces) {
        if (stopped)
            f.buf.append(piece);  // what follows the message stays buffered
        else
            stopped = !f.push(piece);
    }
    f.eof();
    check(f.header_done && f.p->chunked(), "the fixed head did not parse as chunked");
    check(mode == fuzz::framing::chunked || f.sink.bytes == f.out.size(), "sink byte count");
    return {f.out, f.buf, f.ec, f.p->is_done()};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view body(reinterpret_cast<const char*>(data), size);
    auto pieces = fuzz::take_pieces(body);
    pieces.insert(pieces.begin(), head);
    const std::string whole_input = std::string(head) + std::string(body);

    const result whole = decode({whole_input}, fuzz::framing::identity);
    const result split = decode(pieces, fuzz::framing::identity);
    check(whole.ec == split.ec, "error differs whole vs split");
    check(whole.done == split.done, "completion differs whole vs split");
    check(whole.out == split.out, "decoded body differs whole vs split");
    if (whole.done) check(whole.rest == split.rest, "bytes after the message differ whole vs split");
    check(whole.done == !whole.ec, "ended without completing or failing");
    if (!whole.done) return 0;

    // What the session forwards upstream, parsed again, is the same body.
    const result rechunked = decode({whole_input}, fuzz::framing::chunked);
    const result again = decode({std::string(head) + rechunked.out}, fuzz::framing::identity);
    check(again.done && !again.ec && again.rest.empty(), "re-chunked body does not parse");
    check(again.out == whole.out, "re-chunked body decodes differently");
    return 0;
}
