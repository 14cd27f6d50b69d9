// Socket-free tests of the HTTP/1 parser: framing checks and body re-framing.
#include "http/message.hpp"

#include <doctest/doctest.h>
#include <boost/beast/http/error.hpp>

#include <string>

using namespace sluice::http;
namespace bhttp = boost::beast::http;

namespace {

struct parsed {
    boost::system::error_code ec;
    message_head head;
    std::string out;
    bool done = false;
    framing_error framing = framing_error::none;
    bool expect_continue = false;
};

// Feeds `raw` to a request parser in pieces of `step` bytes, re-framing the body as `mode`.
parsed parse_request(const std::string& raw, body_sink::framing mode = body_sink::framing::identity,
                     std::size_t step = 1 << 20, std::uint32_t header_limit = 8192) {
    parsed r;
    body_sink sink{&r.out, body_sink::framing::none, 0};
    request_parser p(r.head, sink);
    p.eager(false);
    p.header_limit(header_limit);
    std::string pending;
    std::size_t fed = 0;
    while (!p.is_done()) {
        if (pending.empty() || r.ec == bhttp::error::need_more) {
            if (fed >= raw.size()) break;
            pending += raw.substr(fed, step);
            fed += step;
        }
        r.ec = {};
        auto n = p.put(boost::asio::buffer(pending), r.ec);
        pending.erase(0, n);
        if (r.ec && r.ec != bhttp::error::need_more) break;
        if (p.is_header_done() && sink.mode == body_sink::framing::none && !p.is_done()) sink.mode = mode;
    }
    r.done = p.is_done();
    r.framing = p.framing();
    r.expect_continue = p.expect_continue();
    if (r.ec == bhttp::error::need_more) r.ec = {};
    return r;
}

}  // namespace

TEST_CASE("a simple request is parsed into its head") {
    auto r = parse_request("GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-One: 1\r\nx-two:  2 \r\n\r\n");
    REQUIRE_FALSE(r.ec);
    CHECK(r.done);
    CHECK(r.head.method == bhttp::verb::get);
    CHECK(r.head.method_text() == "GET");
    CHECK(r.head.target() == "/a?b=1");
    CHECK(r.head.version == 11);
    REQUIRE(r.head.fields().size() == 3);
    CHECK(r.head.name(r.head.fields()[2]) == "x-two");
    CHECK(r.head.value(r.head.fields()[2]) == "2");
    CHECK(r.head.find(bhttp::field::host) == "x");
}

TEST_CASE("the same request parsed byte by byte gives the same head") {
    auto r = parse_request("POST /p HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", body_sink::framing::identity, 1);
    REQUIRE_FALSE(r.ec);
    CHECK(r.done);
    CHECK(r.head.version == 10);
    CHECK(r.out == "abc");
}

TEST_CASE("Transfer-Encoding other than exactly chunked is refused") {
    for (const char* te : {"gzip, chunked", "chunked, identity", "identity", "xchunked", "chunked;q=1"}) {
        CAPTURE(te);
        auto r =
            parse_request(std::string("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: ") + te + "\r\n\r\n0\r\n\r\n");
        CHECK(r.ec);
        CHECK(r.framing == framing_error::transfer_encoding_not_chunked);
    }
}

TEST_CASE("Content-Length together with Transfer-Encoding is refused in either order") {
    auto a = parse_request("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n");
    CHECK(a.ec);
    auto b = parse_request("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n");
    CHECK(b.ec);
    auto c = parse_request("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nContent-Length: 5\r\n\r\nhello");
    CHECK(c.ec);
    CHECK(c.framing != framing_error::none);
}

TEST_CASE("differing Content-Lengths are refused, repeated equal ones accepted") {
    auto bad = parse_request("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello");
    CHECK(bad.ec == bhttp::error::multiple_content_length);
    auto list = parse_request("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello");
    CHECK(list.ec);
    auto same = parse_request("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello");
    CHECK_FALSE(same.ec);
    CHECK(same.out == "hello");
}

TEST_CASE("two chunked Transfer-Encoding fields are refused") {
    auto r = parse_request(
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
    CHECK(r.ec);
}

TEST_CASE("a header over the limit is reported as header_limit") {
    std::string big(9000, 'a');
    auto r = parse_request("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n");
    CHECK(r.ec == bhttp::error::header_limit);
    auto split =
        parse_request("GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + big + "\r\n\r\n", body_sink::framing::identity, 100);
    CHECK(split.ec == bhttp::error::header_limit);
}

TEST_CASE("a chunked body is re-framed for the next hop") {
    std::string raw =
        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        "3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: t\r\n\r\n";
    SUBCASE("as identity bytes") {
        auto r = parse_request(raw, body_sink::framing::identity, 7);
        REQUIRE_FALSE(r.ec);
        CHECK(r.out == "abcde");
    }
    SUBCASE("as clean chunks, extensions and trailers dropped") {
        auto r = parse_request(raw, body_sink::framing::chunked);
        REQUIRE_FALSE(r.ec);
        CHECK(r.out == "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n");
    }
}

TEST_CASE("Expect: 100-continue is recognised") {
    auto r = parse_request("PUT / HTTP/1.1\r\nHost: x\r\nExpect: 100-Continue\r\nContent-Length: 1\r\n\r\nz");
    CHECK(r.expect_continue);
    auto other = parse_request("PUT / HTTP/1.1\r\nHost: x\r\nExpect: something\r\nContent-Length: 1\r\n\r\nz");
    CHECK_FALSE(other.expect_continue);
}

TEST_CASE("malformed requests are errors") {
    for (const char* raw : {"GET\r\n\r\n", "GET / HTTP/1.1\r\nBad Header\r\n\r\n", "GET / HTTP/9.9\r\n\r\n",
                            "GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
                            "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}) {
        CAPTURE(raw);
        auto r = parse_request(raw);
        CHECK(r.ec);
    }
}
