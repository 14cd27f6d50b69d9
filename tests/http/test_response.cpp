// Sluice's own answers (http/response.hpp): every response parses as HTTP/1.1 with Beast's
// parser, its Content-Length frames exactly its JSON body, and the table of error answers in
// docs/operations.md lists exactly the failures the code has.
#include "http/response.hpp"

#include <doctest/doctest.h>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <cstdlib>
#include <ctime>

#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace bhttp = boost::beast::http;
namespace fail = sluice::http::fail;
using sluice::http::failure;

struct named_failure {
    const char* name;
    const failure& f;
};

// Every constant of http::fail. The docs test below also checks that response.hpp
// declares no constant missing here.
const std::vector<named_failure> all_failures{
    {"no_route", fail::no_route},
    {"check_peer", fail::check_peer},
    {"check_path", fail::check_path},
    {"check_method", fail::check_method},
    {"check_no_uri", fail::check_no_uri},
    {"check_no_client", fail::check_no_client},
    {"check_twice", fail::check_twice},
    {"check_bad_method", fail::check_bad_method},
    {"no_upstream", fail::no_upstream},
    {"upstream_busy", fail::upstream_busy},
    {"bad_request", fail::bad_request},
    {"bad_framing", fail::bad_framing},
    {"bad_framing_http10", fail::bad_framing_http10},
    {"bad_length", fail::bad_length},
    {"bad_coding", fail::bad_coding},
    {"bad_host", fail::bad_host},
    {"bad_target", fail::bad_target},
    {"bad_body", fail::bad_body},
    {"unauthorized", fail::unauthorized},
    {"forbidden", fail::forbidden},
    {"missing_identifier", fail::missing_identifier},
    {"ambiguous_identifier", fail::ambiguous_identifier},
    {"connect_refused", fail::connect_refused},
    {"bad_method", fail::bad_method},
    {"header_timeout", fail::header_timeout},
    {"body_timeout", fail::body_timeout},
    {"too_large", fail::too_large},
    {"bad_expect", fail::bad_expect},
    {"header_too_large", fail::header_too_large},
    {"upstream_refused", fail::upstream_refused},
    {"upstream_connect_timeout", fail::upstream_connect_timeout},
    {"upstream_tls", fail::upstream_tls},
    {"upstream_send", fail::upstream_send},
    {"upstream_closed", fail::upstream_closed},
    {"upstream_invalid", fail::upstream_invalid},
    {"upstream_cut", fail::upstream_cut},
    {"upstream_unasked_101", fail::upstream_unasked_101},
    {"store_down", fail::store_down},
    {"upstream_timeout", fail::upstream_timeout},
    {"upstream_send_timeout", fail::upstream_send_timeout},
    {"client_gone", fail::client_gone},
};

struct parsed {
    bhttp::response<bhttp::string_body> msg;
    std::size_t consumed = 0;  // bytes of the input the response took
    std::string head;          // the raw head, through the blank line
};

// Parses one whole response from the start of `bytes` with Beast's parser.
parsed parse_response(std::string_view bytes) {
    bhttp::response_parser<bhttp::string_body> p;
    p.eager(true);
    boost::beast::error_code ec;
    parsed out;
    out.consumed = p.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
    REQUIRE_MESSAGE(!ec, ec.message());
    REQUIRE(p.is_done());
    out.msg = p.release();
    const auto end = bytes.find("\r\n\r\n");
    REQUIRE(end != std::string_view::npos);
    out.head = std::string(bytes.substr(0, end + 4));
    return out;
}

using sluice::http::connection;
constexpr connection all_connections[] = {connection::keep_alive, connection::keep_alive_http10, connection::close};

// What the answer says of its connection, as an HTTP/1.1 client reads it (and an HTTP/1.0
// one: keep-alive said aloud); and its Date, an IMF-fixdate within a few seconds of now.
void check_connection(const parsed& r, connection c) {
    CHECK(r.msg.count(bhttp::field::connection) == (c == connection::keep_alive ? 0u : 1u));
    if (c == connection::close) CHECK(r.msg[bhttp::field::connection] == "close");
    if (c == connection::keep_alive_http10) CHECK(r.msg[bhttp::field::connection] == "keep-alive");
    CHECK(r.msg.keep_alive() == (c != connection::close));

    REQUIRE(r.msg.count(bhttp::field::date) == 1);
    const std::string date(r.msg[bhttp::field::date]);
    CHECK(std::regex_match(
        date,
        std::regex(
            R"((Mon|Tue|Wed|Thu|Fri|Sat|Sun), \d\d (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) \d{4} \d\d:\d\d:\d\d GMT)")));
    std::tm t{};
    REQUIRE(strptime(date.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &t) != nullptr);
    CHECK(std::abs(timegm(&t) - std::time(nullptr)) <= 5);
}

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    REQUIRE_MESSAGE(in, "cannot open " << path);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// The (status, code) rows of docs/operations.md's "### Error answers" table.
std::set<std::pair<unsigned, std::string>> documented_error_rows() {
    const std::string doc = read_file(SLUICE_TEST_DIR "/../docs/operations.md");
    auto at = doc.find("\n### Error answers\n");
    REQUIRE_MESSAGE(at != std::string::npos, "docs/operations.md has no \"### Error answers\" section");
    std::istringstream in(doc.substr(at + 1));
    std::set<std::pair<unsigned, std::string>> rows;
    const std::regex row(R"(^\|\s*(\d{3})\s*\|\s*`?([a-z_]+)`?\s*\|.*)");
    const std::regex any_row(R"(^\|.*)");
    bool in_table = false;
    std::string line;
    std::getline(in, line);  // the heading
    while (std::getline(in, line)) {
        if (line.rfind("#", 0) == 0) break;  // the next section
        const bool table_line = std::regex_match(line, any_row);
        if (in_table && !table_line) break;  // the table ended
        if (!table_line) continue;
        in_table = true;
        std::smatch m;
        if (std::regex_match(line, m, row)) rows.emplace(static_cast<unsigned>(std::stoul(m[1])), m[2]);
    }
    return rows;
}

}  // namespace

TEST_CASE("write_failure: a valid HTTP/1.1 response, Content-Length framing the JSON {error, message}") {
    for (const auto& nf : all_failures) {
        const failure& f = nf.f;
        for (connection close : all_connections) {
            CAPTURE(nf.name);
            CAPTURE(static_cast<int>(close));
            std::string out;
            sluice::http::write_failure(out, f, close);
            auto r = parse_response(out);
            CHECK(r.consumed == out.size());  // nothing after the body
            CHECK(r.msg.version() == 11);
            CHECK(r.msg.result_int() == f.status);
            CHECK(r.msg.reason() == bhttp::obsolete_reason(static_cast<bhttp::status>(f.status)));
            CHECK(r.msg[bhttp::field::content_type] == "application/json");
            REQUIRE(r.msg.has_content_length());
            CHECK(r.msg[bhttp::field::content_length] == std::to_string(r.msg.body().size()));
            CHECK(out.size() == r.head.size() + r.msg.body().size());
            check_connection(r, close);

            auto body = boost::json::parse(r.msg.body());
            REQUIRE(body.is_object());
            const auto& o = body.as_object();
            CHECK(o.size() == 2);
            REQUIRE(o.contains("error"));
            REQUIRE(o.contains("message"));
            CHECK(o.at("error").as_string() == f.code);
            CHECK(o.at("message").as_string() == f.message);  // quotes (bad_framing) escaped and back
        }
    }
}

TEST_CASE("write_failure: extra fields go in the head, with() changes only the message, output is appended") {
    std::string out = "HTTP/1.1 100 Continue\r\n\r\n";  // already queued: must stay in front
    const std::string before = out;
    const std::string message = "token expired \"now\"\\";
    sluice::http::write_failure(out, fail::unauthorized.with(message), connection::keep_alive,
                                "WWW-Authenticate: Bearer\r\nX-Sluice-Test: a, b\r\n");
    REQUIRE(out.rfind(before, 0) == 0);
    auto r = parse_response(std::string_view(out).substr(before.size()));
    CHECK(r.consumed == out.size() - before.size());
    CHECK(r.msg.result_int() == 401);
    CHECK(r.msg["WWW-Authenticate"] == "Bearer");
    CHECK(r.msg["X-Sluice-Test"] == "a, b");
    CHECK(r.head.find("X-Sluice-Test: a, b\r\n") != std::string::npos);
    CHECK(r.msg.body().find("X-Sluice-Test") == std::string::npos);
    check_connection(r, connection::keep_alive);
    auto body = boost::json::parse(r.msg.body()).as_object();
    CHECK(body.at("error").as_string() == "unauthorized");
    CHECK(body.at("message").as_string() == message);

    // Two answers in a row (pipelining) frame apart.
    std::string two;
    sluice::http::write_failure(two, fail::too_large, connection::keep_alive);
    const auto first_size = two.size();
    sluice::http::write_failure(two, fail::upstream_timeout, connection::close);
    auto first = parse_response(two);
    CHECK(first.consumed == first_size);
    CHECK(first.msg.result_int() == 413);
    auto second = parse_response(std::string_view(two).substr(first.consumed));
    CHECK(second.msg.result_int() == 504);
    check_connection(second, connection::close);
}

TEST_CASE("write_limited: 429 with Retry-After, the rate-limit fields, and {error, policy, retry_after}") {
    const std::string fields = "RateLimit-Policy: \"ip-1s\";q=10;w=1\r\nRateLimit: \"ip-1s\";r=0;t=1\r\n";
    struct example {
        std::string policy;
        std::int64_t retry;
        connection close;
    };
    for (const auto& e :
         {example{"default", 1, connection::keep_alive}, example{"login-v2_x", 42, connection::close},
          example{"search", 1'234'567'890'123, connection::keep_alive_http10}, example{"p", 3600, connection::close}}) {
        CAPTURE(e.policy);
        CAPTURE(e.retry);
        std::string out;
        sluice::http::write_limited(out, e.policy, e.retry, fields, e.close);
        auto r = parse_response(out);
        CHECK(r.consumed == out.size());
        CHECK(r.msg.version() == 11);
        CHECK(r.msg.result() == bhttp::status::too_many_requests);
        CHECK(r.msg.reason() == "Too Many Requests");
        CHECK(r.msg[bhttp::field::content_type] == "application/json");
        CHECK(r.msg[bhttp::field::retry_after] == std::to_string(e.retry));
        CHECK(r.msg["RateLimit-Policy"] == "\"ip-1s\";q=10;w=1");
        CHECK(r.msg["RateLimit"] == "\"ip-1s\";r=0;t=1");
        CHECK(r.head.find(fields) != std::string::npos);
        REQUIRE(r.msg.has_content_length());
        CHECK(r.msg[bhttp::field::content_length] == std::to_string(r.msg.body().size()));
        check_connection(r, e.close);

        auto body = boost::json::parse(r.msg.body());
        REQUIRE(body.is_object());
        const auto& o = body.as_object();
        CHECK(o.size() == 3);
        CHECK(o.at("error").as_string() == "rate_limited");
        CHECK(o.at("policy").as_string() == e.policy);
        REQUIRE(o.at("retry_after").is_int64());
        CHECK(o.at("retry_after").as_int64() == e.retry);
    }

    // No fields (response.headers: none) is still a whole response.
    std::string out;
    sluice::http::write_limited(out, "default", 7, "", connection::keep_alive);
    auto r = parse_response(out);
    CHECK(r.consumed == out.size());
    CHECK(r.msg[bhttp::field::retry_after] == "7");
    CHECK(r.msg.find("RateLimit") == r.msg.end());
}

TEST_CASE("write_blocked: 429 with the block's Retry-After and {error: blocked, policy, retry_after, message}") {
    for (const auto close : {connection::keep_alive, connection::close, connection::keep_alive_http10}) {
        std::string out;
        sluice::http::write_blocked(out, "api", 600, close);
        auto r = parse_response(out);
        CHECK(r.consumed == out.size());
        CHECK(r.msg.result() == bhttp::status::too_many_requests);
        CHECK(r.msg[bhttp::field::content_type] == "application/json");
        CHECK(r.msg[bhttp::field::retry_after] == "600");
        CHECK(r.msg.find("RateLimit") == r.msg.end());
        CHECK(r.msg[bhttp::field::content_length] == std::to_string(r.msg.body().size()));
        check_connection(r, close);
        const auto body = boost::json::parse(r.msg.body()).as_object();
        CHECK(body.at("error").as_string() == "blocked");
        CHECK(body.at("policy").as_string() == "api");
        CHECK(body.at("retry_after").as_int64() == 600);
        CHECK(!body.at("message").as_string().empty());
    }
}

TEST_CASE("append_number writes decimal digits after what is there") {
    std::string out = "n=";
    sluice::http::append_number(out, 0);
    out += ',';
    sluice::http::append_number(out, 18'446'744'073'709'551'615ull);
    CHECK(out == "n=0,18446744073709551615");
}

TEST_CASE("the table of error answers in docs/operations.md lists exactly the (status, code) pairs of http::fail") {
    const auto rows = documented_error_rows();
    REQUIRE(rows.size() >= 5);  // the table was found and read

    std::set<std::pair<unsigned, std::string>> in_code;
    for (const auto& nf : all_failures) in_code.emplace(nf.f.status, std::string(nf.f.code));
    for (const auto& pair : in_code) {
        CAPTURE(pair.first);
        CAPTURE(pair.second);
        CHECK_MESSAGE(rows.count(pair) == 1, "docs/operations.md's error table lacks this answer");
    }
    // 429 rate_limited and 429 blocked are written by write_limited and write_blocked, not
    // from the table of failures.
    for (const auto& pair : rows) {
        CAPTURE(pair.first);
        CAPTURE(pair.second);
        const bool documented_elsewhere =
            pair.first == 429 && (pair.second == "rate_limited" || pair.second == "blocked");
        CHECK_MESSAGE((in_code.count(pair) == 1 || documented_elsewhere),
                      "docs/operations.md lists an answer http::fail does not have");
    }

    // The list above is complete: response.hpp declares no other failure constant.
    const std::string header = read_file(SLUICE_TEST_DIR "/../src/http/response.hpp");
    const std::regex decl(R"(inline constexpr failure (\w+)\{)");
    std::set<std::string> declared, listed;
    for (auto it = std::sregex_iterator(header.begin(), header.end(), decl); it != std::sregex_iterator(); ++it)
        declared.insert((*it)[1]);
    for (const auto& nf : all_failures) listed.insert(nf.name);
    CHECK(declared == listed);
}
