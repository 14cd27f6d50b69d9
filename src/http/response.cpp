#include "http/response.hpp"

#include <boost/beast/http/status.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <ctime>

namespace sluice::http {

void append_number(std::string& out, std::uint64_t n) {
    char buf[24];
    auto r = std::to_chars(buf, buf + sizeof buf, n);
    out.append(buf, r.ptr);
}

std::string_view date_now() {
    static constexpr const char* days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static constexpr const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                             "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    thread_local std::time_t cached_at = -1;
    thread_local char text[32];
    thread_local int length = 0;
    const std::time_t now = std::time(nullptr);
    if (now != cached_at) {
        std::tm t{};
        gmtime_r(&now, &t);
        length = std::snprintf(text, sizeof text, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[t.tm_wday], t.tm_mday,
                               months[t.tm_mon], t.tm_year + 1900, t.tm_hour, t.tm_min, t.tm_sec);
        cached_at = now;
    }
    return {text, static_cast<std::size_t>(length)};
}

void append_date(std::string& out) {
    out += "Date: ";
    out += date_now();
    out += "\r\n";
}

namespace {

void end_head(std::string& out, connection c) {
    switch (c) {
        case connection::keep_alive: out += "\r\n\r\n"; break;
        case connection::keep_alive_http10: out += "\r\nConnection: keep-alive\r\n\r\n"; break;
        case connection::close: out += "\r\nConnection: close\r\n\r\n"; break;
    }
}

void write_head(std::string& out, unsigned status, std::string_view extra, std::size_t length, connection c) {
    out += "HTTP/1.1 ";
    append_number(out, status);
    out += ' ';
    out += boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
    out += "\r\n";
    append_date(out);
    out += "Content-Type: application/json\r\n";
    out += extra;
    out += "Content-Length: ";
    append_number(out, length);
    end_head(out, c);
}

}  // namespace

void write_failure(std::string& out, const failure& f, connection c, std::string_view extra) {
    auto body = boost::json::serialize(boost::json::object{{"error", f.code}, {"message", f.message}});
    write_head(out, f.status, extra, body.size(), c);
    out += body;
}

void write_admitted(std::string& out, std::string_view fields, connection c) {
    out += "HTTP/1.1 200 OK\r\n";
    append_date(out);
    out += fields;
    out += "Content-Length: 0";
    end_head(out, c);
}

void write_limited(std::string& out, std::string_view policy, std::int64_t retry_after_s, std::string_view fields,
                   connection c) {
    // Policy names are [a-z0-9_-] (config validation): the body needs no escaping. Built
    // in place: this is the answer a flood gets.
    char digits[24];
    const std::string_view retry(digits, std::to_chars(digits, digits + sizeof digits, retry_after_s).ptr - digits);
    constexpr std::string_view open = R"({"error":"rate_limited","policy":")";
    constexpr std::string_view mid = R"(","retry_after":)", in_flight = R"(","reason":"too many requests in flight")";
    const bool known = retry_after_s > 0;
    out += "HTTP/1.1 429 Too Many Requests\r\n";
    append_date(out);
    out += "Content-Type: application/json\r\n";
    if (known) {
        out += "Retry-After: ";
        out += retry;
        out += "\r\n";
    }
    out += fields;
    out += "Content-Length: ";
    append_number(out, open.size() + policy.size() + (known ? mid.size() + retry.size() : in_flight.size()) + 1);
    end_head(out, c);
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

void write_blocked(std::string& out, std::string_view policy, std::int64_t retry_after_s, connection c) {
    std::string body = R"({"error":"blocked","policy":")";
    body += policy;  // [a-z0-9_-]: no escaping
    body += R"(","retry_after":)";
    append_number(body, static_cast<std::uint64_t>(std::max<std::int64_t>(retry_after_s, 0)));
    body += R"(,"message":"the operator blocked this caller until retry_after seconds have passed"})";
    out += "HTTP/1.1 429 Too Many Requests\r\n";
    append_date(out);
    out += "Content-Type: application/json\r\nRetry-After: ";
    append_number(out, static_cast<std::uint64_t>(std::max<std::int64_t>(retry_after_s, 0)));
    out += "\r\nContent-Length: ";
    append_number(out, body.size());
    end_head(out, c);
    out += body;
}

}  // namespace sluice::http
