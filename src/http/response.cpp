#include "http/response.hpp"

#include <boost/beast/http/status.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <charconv>

namespace sluice::http {

void append_number(std::string& out, std::uint64_t n) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, n);
    out.append(buf, r.ptr);
}

namespace {

void write_head(std::string& out, unsigned status, std::string_view extra, std::size_t length, bool close) {
    out += "HTTP/1.1 ";
    append_number(out, status);
    out += ' ';
    out += boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
    out += "\r\nContent-Type: application/json\r\n";
    out += extra;
    out += "Content-Length: ";
    append_number(out, length);
    out += close ? "\r\nConnection: close\r\n\r\n" : "\r\n\r\n";
}

}  // namespace

void write_failure(std::string& out, const failure& f, bool close, std::string_view extra) {
    auto body = boost::json::serialize(boost::json::object{{"error", f.code}, {"message", f.message}});
    write_head(out, f.status, extra, body.size(), close);
    out += body;
}

void write_limited(std::string& out, std::string_view policy, std::int64_t retry_after_s, std::string_view fields,
                   bool close) {
    // Policy names are [a-z0-9_-] (config validation): the body needs no escaping. Built
    // in place: this is the answer a flood gets.
    char digits[24];
    const std::string_view retry(digits, std::to_chars(digits, digits + sizeof digits, retry_after_s).ptr - digits);
    constexpr std::string_view open = R"({"error":"rate_limited","policy":")";
    constexpr std::string_view mid = R"(","retry_after":)", in_flight = R"(","reason":"too many requests in flight")";
    const bool known = retry_after_s > 0;
    out += "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n";
    if (known) {
        out += "Retry-After: ";
        out += retry;
        out += "\r\n";
    }
    out += fields;
    out += "Content-Length: ";
    append_number(out, open.size() + policy.size() + (known ? mid.size() + retry.size() : in_flight.size()) + 1);
    out += close ? "\r\nConnection: close\r\n\r\n" : "\r\n\r\n";
    out += open;
    out += policy;
    if (known) {
        out += mid;
        out += retry;
    } else {
        out += in_flight;
    }
    out += '}';
}

}  // namespace sluice::http
