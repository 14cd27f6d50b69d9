// sluice_test_upstream: a small, real HTTP/1.1 origin server for Sluice's end-to-end tests.
//
//   sluice_test_upstream [--listen 127.0.0.1:0] [--name NAME]
//
// Prints "listening on HOST:PORT" on stdout once it accepts connections and exits 0 on
// SIGTERM/SIGINT. With --name, every response carries "X-Upstream-Name: NAME" (so a test in
// front of a pool can tell which server answered) and /echo's JSON has "upstream_name". One io_context thread; every
// connection is a C++20 coroutine. Request and response bodies are streamed in bounded pieces, so multi-GiB transfers
// use little memory.
//
// Endpoints (query parameters are split on '&' and '=' without percent-decoding):
//   /echo and any other path   200 JSON description of the request (see write_echo)
//   /bytes?n=N[&chunked=1][&piece=SIZE]   N pattern bytes, byte i = 'a' + i % 26
//   /no-length?n=N             N pattern bytes delimited by closing the connection
//   /slow?ms=M                 200 "slow" after M milliseconds
//   /hold?name=N               200 "held" once /let-go?name=N is asked (or after 30 s)
//   /let-go?name=N             200 with the number of /hold requests of that name let go
//   /close-early               closes without responding
//   /reset                     aborts the connection (RST)
//   /close-after               200 "bye" (no Connection: close), then closes
//   /status?code=C             status C, body "status C" (none for 1xx, 204, 304)
//   /early-hints               103 Early Hints, then 200 "hinted"
//   /upgrade                   101 + raw echo if the request has Upgrade, else 426
//   /stats                     {"connections_accepted": N, "open_connections": O, "requests": M,
//                               "gets": G, "posts": P, "healthz": Z, "desync_sent": D,
//                               "bodies_in_progress": B, "held": H}: O connections are open now;
//                               M request heads arrived (not counting /stats, /control and
//                               /healthz), G and P of them GET and POST; Z /healthz requests
//                               arrived; D /desync trailers were written; B request bodies are
//                               being read now (their head has arrived, their end not yet); H
//                               /hold requests are waiting
//   /healthz                   200 "ok", or the status set with /control?health=CODE
//   /control?status=C&delay_ms=M&reset=R&health=H   changes how this server answers, from now
//                               on, every request except /control, /stats and /healthz (each
//                               parameter optional; only those given change): status C (body
//                               "status C"; 0: back to normal answers), after waiting M ms
//                               (0: no wait; a delay alone slows normal answers); reset=1:
//                               read the whole request, then abort the connection (RST), as
//                               /reset does (reset=0: no more); health: /healthz's status (0:
//                               200). Answers 200 with the settings as JSON
//   /response-headers          200 "ok" with hop-by-hop response headers
//   /desync?status=S&delay_ms=D   a misbehaving upstream: a complete response (status S, default
//                               200: Content-Length 2, body "ok"; 204 and 304 and HEAD: no body),
//                               then, D ms later (default 0: in the same write), the bytes of
//                               another whole response that nobody asked for,
//                               "HTTP/1.1 200 OK ... SECRET-FOR-SOMEONE-ELSE!" (desync_trailer).
//                               The connection stays open.
//   /early?code=C&close_ms=M   answers status C (default 413) with Connection: close as soon as
//                               the request head is read, never reading the body; then
//                               half-closes, waits M ms (default 0) and closes (with unread
//                               input the kernel then sends a reset)
// A request with "Expect: 100-continue" and a body gets "100 Continue" before its body is read
// (except on /early).
// HEAD gets the headers a GET would get (Content-Length included) and no body.

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sluice::test {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using header_list = std::vector<std::pair<std::string, std::string>>;

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t max_kept_body = 65536;
constexpr std::size_t write_piece = 65536;
constexpr std::size_t max_chunk_piece = 1024 * 1024;

// What /desync sends after its own complete response: a whole response meant for nobody.
constexpr std::string_view desync_trailer =
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 24\r\n\r\nSECRET-FOR-SOMEONE-ELSE!";

struct server_stats {
    std::uint64_t connections_accepted = 0;
    std::uint64_t open_connections = 0;
    std::uint64_t requests = 0;
    std::uint64_t gets = 0;
    std::uint64_t posts = 0;
    std::uint64_t healthz = 0;
    std::uint64_t desync_sent = 0;
    std::uint64_t bodies_in_progress = 0;
};
server_stats g_stats;  // only touched from the single io_context thread
// How every request but /control, /stats and /healthz is answered, as /control set it.
struct override_settings {
    std::uint64_t status = 0;  // 0: normal answers
    std::uint64_t delay_ms = 0;
    bool reset = false;
    std::uint64_t health = 0;  // /healthz's status, 0: 200
};
override_settings g_override;  // the single io_context thread too
std::string g_name;            // --name: sent as X-Upstream-Name, set before the server starts
// The /hold requests waiting, by name (the single io_context thread too).
std::multimap<std::string, asio::steady_timer*, std::less<>> g_held;

// 'a'..'z' repeated; a piece starting at absolute offset `off` starts at pattern()[off % 26].
const std::string& pattern() {
    static const std::string p = [] {
        std::string s(max_chunk_piece + 26, '\0');
        for (std::size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>('a' + i % 26);
        return s;
    }();
    return p;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
        auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c; };
        if (lower(a[i]) != lower(b[i])) return false;
    }
    return true;
}

// Whether a request target's path is `path` (with or without a query).
bool is_path(std::string_view target, std::string_view path) {
    return target.starts_with(path) && (target.size() == path.size() || target[path.size()] == '?');
}

// Parses a request without storing the body: it is counted, summed and kept only while small.
class request_reader : public http::basic_parser<true> {
public:
    std::string method;
    std::string target;
    int version = 11;
    header_list headers;
    std::uint64_t body_bytes = 0;
    std::uint64_t body_sum = 0;
    std::string body;
    bool body_kept = true;

    const std::string* find_header(std::string_view name) const {
        for (const auto& [n, v] : headers)
            if (iequals(n, name)) return &v;
        return nullptr;
    }

private:
    void consume(std::string_view data) {
        body_bytes += data.size();
        std::uint64_t sum = 0;
        for (unsigned char c : data) sum += c;
        body_sum += sum;
        if (body_kept) {
            if (body.size() + data.size() <= max_kept_body) {
                body.append(data);
            } else {
                body_kept = false;
                std::string().swap(body);
            }
        }
    }

    void on_request_impl(http::verb, beast::string_view method_str, beast::string_view tgt, int ver,
                         error_code&) override {
        method.assign(method_str);
        target.assign(tgt);
        version = ver;
    }
    void on_response_impl(int, beast::string_view, int, error_code&) override {}
    void on_field_impl(http::field, beast::string_view name, beast::string_view value, error_code&) override {
        headers.emplace_back(std::string(name), std::string(value));
    }
    void on_header_impl(error_code&) override {}
    void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
    std::size_t on_body_impl(beast::string_view data, error_code&) override {
        consume(data);
        return data.size();
    }
    void on_chunk_header_impl(std::uint64_t, beast::string_view, error_code&) override {}
    std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view data, error_code&) override {
        consume(data);
        return data.size();
    }
    void on_finish_impl(error_code&) override {}
};

struct query_params {
    std::vector<std::pair<std::string, std::string>> items;

    explicit query_params(std::string_view query) {
        while (!query.empty()) {
            auto amp = query.find('&');
            std::string_view item = query.substr(0, amp);
            query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
            if (item.empty()) continue;
            auto eq = item.find('=');
            if (eq == std::string_view::npos)
                items.emplace_back(std::string(item), std::string());
            else
                items.emplace_back(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1)));
        }
    }

    std::optional<std::string> get(std::string_view key) const {
        for (const auto& [k, v] : items)
            if (k == key) return v;
        return std::nullopt;
    }

    std::uint64_t get_u64(std::string_view key, std::uint64_t fallback) const {
        auto v = get(key);
        if (!v) return fallback;
        std::uint64_t out = 0;
        auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
        if (ec != std::errc{} || p != v->data() + v->size()) return fallback;
        return out;
    }
};

std::string reason_for(int status) {
    auto s = http::int_to_status(static_cast<unsigned>(status));
    if (s == http::status::unknown) return "Unknown";
    return std::string(http::obsolete_reason(s));
}

std::string format_head(int status, const header_list& headers) {
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " + reason_for(status) + "\r\n";
    for (const auto& [n, v] : headers) out += n + ": " + v + "\r\n";
    if (!g_name.empty()) out += "X-Upstream-Name: " + g_name + "\r\n";
    out += "\r\n";
    return out;
}

// Connection management headers for a response to a request with the given properties.
void add_connection_header(header_list& h, bool keep_alive, int version) {
    if (!keep_alive)
        h.emplace_back("Connection", "close");
    else if (version == 10)
        h.emplace_back("Connection", "keep-alive");
}

class session : public std::enable_shared_from_this<session> {
public:
    session(tcp::socket sock, std::uint64_t id) : sock_(std::move(sock)), id_(id) { ++g_stats.open_connections; }
    ~session() { --g_stats.open_connections; }
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    asio::awaitable<void> run() {
        try {
            co_await loop();
        } catch (const std::exception&) {
            // a broken connection is nothing the server has to report
        }
        error_code ignored;
        sock_.close(ignored);
    }

private:
    tcp::socket sock_;
    std::uint64_t id_;
    beast::flat_buffer buf_;

    asio::awaitable<void> loop() {
        for (;;) {
            request_reader req;
            req.body_limit(boost::none);
            req.header_limit(1024 * 1024);
            auto [ec, n] = co_await http::async_read_header(sock_, buf_, req, use_tuple);
            if (ec) co_return;
            // /stats, /control and /healthz are not counted, so tests can poll and steer the
            // server (and health checks can run) without changing the counts they look at.
            if (is_path(req.target, "/healthz")) {
                ++g_stats.healthz;
            } else if (!is_path(req.target, "/stats") && !is_path(req.target, "/control")) {
                ++g_stats.requests;
                if (req.method == "GET") ++g_stats.gets;
                if (req.method == "POST") ++g_stats.posts;
            }
            // Answered from the head alone: the body is never read.
            if (req.target == "/early" || req.target.rfind("/early?", 0) == 0) {
                co_await early_answer(req);
                co_return;
            }

            if (!req.is_done() && req.version >= 11) {
                if (const auto* expect = req.find_header("Expect"); expect && iequals(*expect, "100-continue")) {
                    static const std::string cont = "HTTP/1.1 100 Continue\r\n\r\n";
                    auto [wec, wn] = co_await asio::async_write(sock_, asio::buffer(cont), use_tuple);
                    if (wec) co_return;
                }
            }
            if (!req.is_done()) {
                ++g_stats.bodies_in_progress;
                auto [rec, rn] = co_await http::async_read(sock_, buf_, req, use_tuple);
                --g_stats.bodies_in_progress;
                if (rec) co_return;
            }

            bool keep = co_await dispatch(req);
            if (!keep) co_return;
        }
    }

    // Returns whether the connection stays open for another request.
    asio::awaitable<bool> dispatch(request_reader& req) {
        std::string_view target = req.target;
        auto qpos = target.find('?');
        std::string_view path = target.substr(0, qpos);
        query_params q(qpos == std::string_view::npos ? std::string_view{} : target.substr(qpos + 1));
        const bool head = req.method == "HEAD";
        const bool keep = req.keep_alive();

        if (path == "/control") co_return co_await control(req, q, head, keep);
        if (path == "/healthz") {
            // (the body is a local: a temporary made by ?: in a co_await's arguments is freed twice by GCC 12)
            const int code = g_override.health == 0 ? 200 : static_cast<int>(g_override.health);
            std::string body = code == 200 ? "ok" : "status " + std::to_string(code);
            co_return co_await write_simple(code, "text/plain", std::move(body), req, head, keep);
        }
        if (path != "/stats") {
            if (g_override.reset) co_return reset();
            if (g_override.delay_ms > 0) {
                asio::steady_timer timer(sock_.get_executor());
                timer.expires_after(std::chrono::milliseconds(g_override.delay_ms));
                auto [tec] = co_await timer.async_wait(use_tuple);
                (void)tec;
                if (g_override.reset) co_return reset();  // set while this request waited
            }
            if (g_override.status != 0) {
                const int code = static_cast<int>(g_override.status);
                co_return co_await write_simple(code, "text/plain", "status " + std::to_string(code), req, head, keep);
            }
        }
        if (path == "/bytes") co_return co_await write_bytes(req, q, head, keep);
        if (path == "/no-length") co_return co_await write_no_length(q, head);
        if (path == "/slow") {
            asio::steady_timer timer(sock_.get_executor());
            timer.expires_after(std::chrono::milliseconds(q.get_u64("ms", 0)));
            auto [tec] = co_await timer.async_wait(use_tuple);
            (void)tec;
            co_return co_await write_simple(200, "text/plain", "slow", req, head, keep);
        }
        if (path == "/hold") {
            asio::steady_timer timer(sock_.get_executor(), std::chrono::seconds(30));
            const auto at = g_held.emplace(std::string(q.get("name").value_or("")), &timer);
            auto [tec] = co_await timer.async_wait(use_tuple);
            (void)tec;
            g_held.erase(at);
            co_return co_await write_simple(200, "text/plain", "held", req, head, keep);
        }
        if (path == "/let-go") {
            auto [from, to] = g_held.equal_range(q.get("name").value_or(""));
            std::size_t n = 0;
            for (auto it = from; it != to; ++it, ++n) it->second->cancel();
            co_return co_await write_simple(200, "text/plain", std::to_string(n), req, head, keep);
        }
        if (path == "/close-early") {
            error_code ignored;
            sock_.close(ignored);
            co_return false;
        }
        if (path == "/reset") co_return reset();
        if (path == "/close-after") {
            header_list h{{"Content-Type", "text/plain"}, {"Content-Length", "3"}};
            if (req.version == 10 && keep) h.emplace_back("Connection", "keep-alive");
            std::string out = format_head(200, h);
            if (!head) out += "bye";
            co_await asio::async_write(sock_, asio::buffer(out), use_tuple);
            error_code ignored;
            sock_.shutdown(tcp::socket::shutdown_send, ignored);
            sock_.close(ignored);
            co_return false;
        }
        if (path == "/status") {
            auto code = q.get_u64("code", 0);
            if (code < 100 || code > 999)
                co_return co_await write_simple(400, "text/plain", "bad code", req, head, keep);
            co_return co_await write_simple(static_cast<int>(code), "text/plain", "status " + std::to_string(code), req,
                                            head, keep);
        }
        if (path == "/early-hints") {
            static const std::string hints = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n";
            auto [wec, wn] = co_await asio::async_write(sock_, asio::buffer(hints), use_tuple);
            if (wec) co_return false;
            co_return co_await write_simple(200, "text/plain", "hinted", req, head, keep);
        }
        if (path == "/upgrade") co_return co_await upgrade(req, head, keep);
        if (path == "/desync") co_return co_await desync(req, q, head);
        if (path == "/stats") {
            json::object o;
            o["connections_accepted"] = g_stats.connections_accepted;
            o["open_connections"] = g_stats.open_connections;
            o["requests"] = g_stats.requests;
            o["gets"] = g_stats.gets;
            o["posts"] = g_stats.posts;
            o["healthz"] = g_stats.healthz;
            o["desync_sent"] = g_stats.desync_sent;
            o["bodies_in_progress"] = g_stats.bodies_in_progress;
            o["held"] = g_held.size();
            co_return co_await write_simple(200, "application/json", json::serialize(o), req, head, keep);
        }
        if (path.starts_with("/cost")) {  // reports ?n= as the request's cost, in X-Request-Cost
            header_list extra{{"X-Request-Cost", q.get("n").value_or("1")},
                              {"Connection", keep ? "keep-alive" : "close"}};
            if (auto also = q.get("also")) extra.emplace_back("x-request-cost", *also);  // a second field
            co_return co_await write_simple(200, "text/plain", "ok", req, head, keep, &extra);
        }
        if (path == "/response-headers") {
            header_list extra{{"Connection", keep ? "X-Secret, keep-alive" : "X-Secret, close"},
                              {"X-Secret", "1"},
                              {"Keep-Alive", "timeout=5"},
                              {"Proxy-Authenticate", "Basic"},
                              {"X-Kept", "yes"}};
            co_return co_await write_simple(200, "text/plain", "ok", req, head, keep, &extra);
        }
        co_return co_await write_echo(req, head, keep);
    }

    // Aborts the connection: a linger of 0 makes close() send a RST.
    bool reset() {
        error_code ignored;
        sock_.set_option(asio::socket_base::linger(true, 0), ignored);
        sock_.close(ignored);
        return false;
    }

    // /control: changes the given settings (a bad value is a 400 and changes nothing).
    asio::awaitable<bool> control(const request_reader& req, const query_params& q, bool head, bool keep) {
        override_settings next = g_override;
        const auto code_ok = [](std::uint64_t c) { return c == 0 || (c >= 200 && c <= 999); };
        for (const auto& [k, v] : q.items) {
            const std::uint64_t n = q.get_u64(k, UINT64_MAX);
            bool ok = false;
            if (k == "status" && code_ok(n)) {
                next.status = n;
                ok = true;
            } else if (k == "delay_ms" && n <= 600000) {
                next.delay_ms = n;
                ok = true;
            } else if (k == "reset" && n <= 1) {
                next.reset = n == 1;
                ok = true;
            } else if (k == "health" && code_ok(n)) {
                next.health = n;
                ok = true;
            }
            if (!ok) co_return co_await write_simple(400, "text/plain", "bad parameter " + k, req, head, keep);
        }
        g_override = next;
        json::object o;
        o["status"] = g_override.status;
        o["delay_ms"] = g_override.delay_ms;
        o["reset"] = g_override.reset;
        o["health"] = g_override.health;
        co_return co_await write_simple(200, "application/json", json::serialize(o), req, head, keep);
    }

    // A complete response with a fixed body. `extra` replaces the connection header logic.
    asio::awaitable<bool> write_simple(int status, std::string_view content_type, std::string body,
                                       const request_reader& req, bool head, bool keep,
                                       const header_list* extra = nullptr) {
        const bool bodiless = status / 100 == 1 || status == 204 || status == 304;
        header_list h;
        if (!bodiless) {
            h.emplace_back("Content-Type", std::string(content_type));
            h.emplace_back("Content-Length", std::to_string(body.size()));
        }
        if (extra)
            h.insert(h.end(), extra->begin(), extra->end());
        else
            add_connection_header(h, keep, req.version);
        std::string out = format_head(status, h);
        if (!bodiless && !head) out += body;
        auto [ec, n] = co_await asio::async_write(sock_, asio::buffer(out), use_tuple);
        if (ec) co_return false;
        if (!keep) co_await graceful_close();
        co_return keep;
    }

    asio::awaitable<bool> write_echo(const request_reader& req, bool head, bool keep) {
        json::object o;
        o["method"] = req.method;
        o["target"] = req.target;
        o["version"] = req.version;
        json::array headers;
        for (const auto& [n, v] : req.headers) headers.push_back(json::array{json::string(n), json::string(v)});
        o["headers"] = std::move(headers);
        o["body_bytes"] = req.body_bytes;
        o["body_sum"] = req.body_sum;
        if (req.body_kept) o["body"] = req.body;
        o["connection_id"] = id_;
        if (!g_name.empty()) o["upstream_name"] = g_name;
        co_return co_await write_simple(200, "application/json", json::serialize(o), req, head, keep);
    }

    asio::awaitable<bool> write_bytes(const request_reader& req, const query_params& q, bool head, bool keep) {
        const std::uint64_t total = q.get_u64("n", 0);
        // Chunked framing does not exist in HTTP/1.0; such clients get a Content-Length.
        const bool chunked = q.get("chunked") == std::optional<std::string>("1") && req.version >= 11;
        const std::size_t piece =
            static_cast<std::size_t>(std::clamp<std::uint64_t>(q.get_u64("piece", 16384), 1, max_chunk_piece));
        header_list h{{"Content-Type", "application/octet-stream"}};
        if (chunked)
            h.emplace_back("Transfer-Encoding", "chunked");
        else
            h.emplace_back("Content-Length", std::to_string(total));
        add_connection_header(h, keep, req.version);
        std::string hdr = format_head(200, h);
        auto [ec, n] = co_await asio::async_write(sock_, asio::buffer(hdr), use_tuple);
        if (ec) co_return false;
        if (!head) {
            const std::string& p = pattern();
            std::uint64_t off = 0;
            const std::size_t step = chunked ? piece : write_piece;
            while (off < total) {
                const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(step, total - off));
                asio::const_buffer data(p.data() + off % 26, len);
                error_code wec;
                if (chunked) {
                    char size_line[32];
                    int sl = std::snprintf(size_line, sizeof size_line, "%zx\r\n", len);
                    std::array<asio::const_buffer, 3> bufs{asio::buffer(size_line, static_cast<std::size_t>(sl)), data,
                                                           asio::buffer("\r\n", 2)};
                    std::tie(wec, std::ignore) = co_await asio::async_write(sock_, bufs, use_tuple);
                } else {
                    std::tie(wec, std::ignore) = co_await asio::async_write(sock_, data, use_tuple);
                }
                if (wec) co_return false;
                off += len;
            }
            if (chunked) {
                auto [tec, tn] = co_await asio::async_write(sock_, asio::buffer("0\r\n\r\n", 5), use_tuple);
                if (tec) co_return false;
            }
        }
        if (!keep) co_await graceful_close();
        co_return keep;
    }

    asio::awaitable<bool> write_no_length(const query_params& q, bool head) {
        const std::uint64_t total = q.get_u64("n", 0);
        std::string hdr = format_head(200, {{"Content-Type", "application/octet-stream"}, {"Connection", "close"}});
        auto [ec, n] = co_await asio::async_write(sock_, asio::buffer(hdr), use_tuple);
        if (ec) co_return false;
        if (!head) {
            const std::string& p = pattern();
            for (std::uint64_t off = 0; off < total;) {
                const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(write_piece, total - off));
                auto [wec, wn] =
                    co_await asio::async_write(sock_, asio::const_buffer(p.data() + off % 26, len), use_tuple);
                if (wec) co_return false;
                off += len;
            }
        }
        co_await graceful_close();
        co_return false;
    }

    asio::awaitable<bool> upgrade(const request_reader& req, bool head, bool keep) {
        const std::string* up = req.find_header("Upgrade");
        if (!up) co_return co_await write_simple(426, "text/plain", "upgrade required", req, head, keep);
        std::string out = format_head(101, {{"Upgrade", *up}, {"Connection", "Upgrade"}});
        auto [ec, n] = co_await asio::async_write(sock_, asio::buffer(out), use_tuple);
        if (ec) co_return false;
        // Bytes that arrived right behind the request head belong to the upgraded stream.
        if (buf_.size() > 0) {
            auto [wec, wn] = co_await asio::async_write(sock_, buf_.data(), use_tuple);
            if (wec) co_return false;
            buf_.consume(buf_.size());
        }
        std::array<char, 16384> chunk;
        for (;;) {
            auto [rec, rn] = co_await sock_.async_read_some(asio::buffer(chunk), use_tuple);
            if (rn > 0) {
                auto [wec, wn] = co_await asio::async_write(sock_, asio::buffer(chunk.data(), rn), use_tuple);
                if (wec) co_return false;
            }
            if (rec) break;
        }
        error_code ignored;
        sock_.shutdown(tcp::socket::shutdown_send, ignored);
        co_return false;
    }

    // A complete response, then (at once or after delay_ms) a second, unasked one.
    asio::awaitable<bool> desync(const request_reader& req, const query_params& q, bool head) {
        const auto status = q.get_u64("status", 200);
        if (status < 200 || status > 999)
            co_return co_await write_simple(400, "text/plain", "bad status", req, head, true);
        const bool bodiless = status == 204 || status == 304;
        header_list h;
        if (!bodiless) {
            h.emplace_back("Content-Type", "text/plain");
            h.emplace_back("Content-Length", "2");
        }
        std::string out = format_head(static_cast<int>(status), h);
        if (!bodiless && !head) out += "ok";
        const auto delay = std::chrono::milliseconds(q.get_u64("delay_ms", 0));
        if (delay.count() == 0) out += desync_trailer;
        auto [ec, n] = co_await asio::async_write(sock_, asio::buffer(out), use_tuple);
        if (ec) co_return false;
        if (delay.count() > 0) {
            asio::steady_timer timer(sock_.get_executor());
            timer.expires_after(delay);
            auto [tec] = co_await timer.async_wait(use_tuple);
            (void)tec;
            auto [wec, wn] = co_await asio::async_write(sock_, asio::buffer(desync_trailer), use_tuple);
            if (wec) co_return false;
        }
        ++g_stats.desync_sent;
        co_return true;
    }

    // Answers from the request head alone, never reading the body, then closes.
    asio::awaitable<void> early_answer(const request_reader& req) {
        std::string_view target = req.target;
        auto qpos = target.find('?');
        query_params q(qpos == std::string_view::npos ? std::string_view{} : target.substr(qpos + 1));
        auto code = q.get_u64("code", 413);
        if (code < 200 || code > 999) code = 400;
        const std::string body = "early " + std::to_string(code);
        std::string out = format_head(
            static_cast<int>(code),
            {{"Content-Type", "text/plain"}, {"Content-Length", std::to_string(body.size())}, {"Connection", "close"}});
        out += body;
        auto [ec, n] = co_await asio::async_write(sock_, asio::buffer(out), use_tuple);
        error_code ignored;
        sock_.shutdown(tcp::socket::shutdown_send, ignored);
        if (!ec) {
            if (auto ms = q.get_u64("close_ms", 0); ms > 0) {
                asio::steady_timer timer(sock_.get_executor());
                timer.expires_after(std::chrono::milliseconds(ms));
                auto [tec] = co_await timer.async_wait(use_tuple);
                (void)tec;
            }
        }
        sock_.close(ignored);
    }

    // Half-close, then discard what the client still sends until it closes too (at most 2 s),
    // so that unread input never turns our close into a reset that could destroy the response.
    asio::awaitable<void> graceful_close() {
        error_code ignored;
        sock_.shutdown(tcp::socket::shutdown_send, ignored);
        auto timer = std::make_shared<asio::steady_timer>(sock_.get_executor());
        timer->expires_after(std::chrono::seconds(2));
        timer->async_wait([self = shared_from_this(), timer](error_code ec) {
            if (!ec) {
                error_code ignored2;
                self->sock_.cancel(ignored2);
            }
        });
        std::array<char, 4096> sink;
        for (;;) {
            auto [ec, n] = co_await sock_.async_read_some(asio::buffer(sink), use_tuple);
            if (ec) break;
        }
        timer->cancel();
    }
};

asio::awaitable<void> run_session(std::shared_ptr<session> s) { co_await s->run(); }

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor) {
    std::uint64_t next_id = 1;
    for (;;) {
        auto [ec, sock] = co_await acceptor.async_accept(use_tuple);
        if (ec == asio::error::operation_aborted) co_return;
        if (ec) {
            // e.g. EMFILE: back off briefly instead of spinning
            asio::steady_timer t(acceptor.get_executor());
            t.expires_after(std::chrono::milliseconds(10));
            co_await t.async_wait(use_tuple);
            continue;
        }
        ++g_stats.connections_accepted;
        error_code ignored;
        sock.set_option(tcp::no_delay(true), ignored);
        auto s = std::make_shared<session>(std::move(sock), next_id++);
        asio::co_spawn(acceptor.get_executor(), run_session(std::move(s)), asio::detached);
    }
}

std::optional<tcp::endpoint> parse_listen(std::string_view s) {
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    std::string host(s.substr(0, colon));
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    std::string_view port_s = s.substr(colon + 1);
    unsigned port = 0;
    auto [p, ec] = std::from_chars(port_s.data(), port_s.data() + port_s.size(), port);
    if (ec != std::errc{} || p != port_s.data() + port_s.size() || port > 65535) return std::nullopt;
    error_code aec;
    auto addr = asio::ip::make_address(host, aec);
    if (aec) return std::nullopt;
    return tcp::endpoint(addr, static_cast<std::uint16_t>(port));
}

int run(int argc, char** argv) {
    std::string listen = "127.0.0.1:0";
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        if (a == "--listen" && i + 1 < argc) {
            listen = argv[++i];
        } else if (a.starts_with("--listen=")) {
            listen = std::string(a.substr(9));
        } else if (a == "--name" && i + 1 < argc) {
            g_name = argv[++i];
        } else if (a.starts_with("--name=")) {
            g_name = std::string(a.substr(7));
        } else {
            std::fprintf(stderr, "usage: sluice_test_upstream [--listen HOST:PORT] [--name NAME]\n");
            return 2;
        }
    }
    auto ep = parse_listen(listen);
    if (!ep) {
        std::fprintf(stderr, "invalid --listen address: %s\n", listen.c_str());
        return 2;
    }

    asio::io_context ioc(1);
    tcp::acceptor acceptor(ioc);
    error_code ec;
    acceptor.open(ep->protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor.bind(*ep, ec);
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        std::fprintf(stderr, "cannot listen on %s: %s\n", listen.c_str(), ec.message().c_str());
        return 1;
    }

    asio::signal_set signals(ioc, SIGINT, SIGTERM);
    signals.async_wait([&](error_code sec, int) {
        if (!sec) ioc.stop();
    });

    auto local = acceptor.local_endpoint();
    std::printf("listening on %s:%u\n", local.address().to_string().c_str(), static_cast<unsigned>(local.port()));
    std::fflush(stdout);

    asio::co_spawn(ioc, accept_loop(acceptor), asio::detached);
    ioc.run();
    return 0;
}

}  // namespace
}  // namespace sluice::test

int main(int argc, char** argv) {
    std::signal(SIGPIPE, SIG_IGN);
    try {
        return sluice::test::run(argc, argv);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "sluice_test_upstream: %s\n", e.what());
        return 1;
    }
}
