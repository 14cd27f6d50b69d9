#include "app/admin.hpp"

#include "base/text.hpp"
#include "base/units.hpp"
#include "http/async.hpp"
#include "http/response.hpp"
#include "identity/hasher.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json.hpp>
#include <boost/url/parse_query.hpp>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <charconv>

namespace sluice::app {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;

using http::use_tuple;

namespace {

struct admin_hooks {
    const metrics::registry& metrics;
    std::function<readiness()> ready;
    std::function<app::reload_result()> reload;
    std::function<std::vector<limit::offender>()> offenders;
    std::function<std::vector<upstream::pool_status>()> upstreams;
};

constexpr std::size_t max_top = 1000;
constexpr std::size_t max_header_bytes = 16 * base::KiB;
constexpr std::size_t max_body_bytes = 64 * base::KiB;
// After an answer that closes the connection, unread input is drained this long, up to this much.
constexpr auto linger_time = std::chrono::seconds(2);
constexpr std::size_t linger_bytes = 4 * base::MiB;
constexpr std::size_t linger_read_bytes = 16 * base::KiB;
constexpr auto eviction_log_interval = std::chrono::minutes(1);

std::string error_body(std::string_view error, std::string_view message) {
    boost::json::object o;
    o["error"] = error;
    o["message"] = message;
    return boost::json::serialize(o);
}

// GET /top's query: at most one n, an integer from 1 to max_top. Why it is refused, or "".
std::string_view parse_top_query(std::string_view query, std::size_t& n) {
    if (query.empty()) return {};
    // A terminated copy: Boost.URL 1.81's parse_query reads its input up to a NUL (it
    // rebuilds a string_view from the bare pointer).
    const std::string terminated(query);
    auto params = boost::urls::parse_query(terminated);
    if (!params) return "malformed query";
    bool seen = false;
    for (const auto& param : *params) {
        if (param.key != "n") return "the only parameter is n, an integer from 1 to 1000";
        if (seen) return "n is given more than once";
        seen = true;
        const std::string_view v(param.value.data(), param.value.size());  // digits need no decoding
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec != std::errc() || end != v.data() + v.size() || n < 1 || n > max_top)
            return "n must be an integer from 1 to 1000";
    }
    return {};
}

// GET /top?n=N: the N identities refused most in the last minute.
std::string top_body(std::size_t n, const admin_hooks& hooks) {
    auto all = limit::offenders::merge(hooks.offenders());
    boost::json::object o;
    o["window_seconds"] = limit::offenders::window_s;
    o["limited_identities"] = all.size();
    boost::json::array list;
    for (const auto& e : limit::offenders::top(std::move(all), n)) {
        boost::json::object item;
        item["identity"] = e.label;
        item["kind"] = identity::to_string(e.kind);
        item["id"] = identity::hasher::to_hex(e.id);
        item["policy"] = e.policy;
        item["refusals"] = e.refusals;
        item["overcount"] = e.overcount;
        list.push_back(std::move(item));
    }
    o["offenders"] = std::move(list);
    return boost::json::serialize(o);
}

// GET /upstreams: every pool of the running config, its servers as last resolved.
std::string upstreams_body(const admin_hooks& hooks) {
    boost::json::array pools;
    for (const auto& p : hooks.upstreams()) {
        boost::json::object po;
        po["name"] = p.name;
        po["balance"] = upstream::to_string(p.balance);
        po["max_in_flight"] = p.max_in_flight;
        po["retries"] = p.counts.retries;
        po["retry_budget_exhausted"] = p.counts.budget_exhausted;
        boost::json::array servers;
        for (const auto& s : p.servers) {
            boost::json::object so;
            so["url"] = s.url;
            so["address"] = s.address;
            so["weight"] = s.weight;
            so["state"] = upstream::to_string(s.state);
            // Summed over workers a gauge can be momentarily negative as a wrapped unsigned.
            so["in_flight"] = static_cast<std::int64_t>(s.counts.in_flight);
            so["requests"] = s.counts.requests;
            so["failures"] = s.counts.failures;
            so["ejections"] = s.ejections;
            so["ejected_for_ms"] = s.ejected_for_ms;
            if (s.last_check_ms == 0) {
                so["last_check"] = nullptr;
            } else {
                boost::json::object check;
                check["at_ms"] = s.last_check_ms;
                check["result"] = s.last_check;
                check["passes_in_row"] = s.check_passes;
                check["failures_in_row"] = s.check_failures;
                so["last_check"] = std::move(check);
            }
            servers.push_back(std::move(so));
        }
        po["servers"] = std::move(servers);
        pools.push_back(std::move(po));
    }
    boost::json::object o;
    o["upstreams"] = std::move(pools);
    return boost::json::serialize(o);
}

std::string reload_body(const app::reload_result& r) {
    boost::json::object o;
    if (r.ok) {
        o["status"] = "reloaded";
        boost::json::array keys;
        for (const auto& k : r.restart_required) keys.emplace_back(k);
        o["restart_required"] = std::move(keys);
    } else {
        o["error"] = "invalid_config";
        o["message"] = r.message;
    }
    return boost::json::serialize(o);
}

bhttp::response<bhttp::string_body> answer(const bhttp::request<bhttp::string_body>& req, const admin_hooks& hooks) {
    const auto& metrics = hooks.metrics;
    const auto& ready = hooks.ready;
    bhttp::response<bhttp::string_body> res{bhttp::status::ok, req.version()};
    res.set(bhttp::field::content_type, "application/json");
    auto target = req.target();
    auto path = target.substr(0, target.find('?'));
    if (path == "/reload") {
        if (req.method() != bhttp::verb::post) {
            res.result(bhttp::status::method_not_allowed);
            res.set(bhttp::field::allow, "POST");
            res.body() = R"({"error":"method_not_allowed"})";
        } else {
            auto r = hooks.reload();
            res.result(r.ok ? bhttp::status::ok : bhttp::status::unprocessable_entity);
            res.body() = reload_body(r);
        }
    } else if (req.method() != bhttp::verb::get && req.method() != bhttp::verb::head) {
        res.result(bhttp::status::method_not_allowed);
        res.set(bhttp::field::allow, "GET, HEAD");
        res.body() = R"({"error":"method_not_allowed"})";
    } else if (path == "/healthz") {
        res.body() = R"({"status":"ok"})";
    } else if (path == "/readyz") {
        switch (ready()) {
            case readiness::ready: res.body() = R"({"status":"ready"})"; break;
            case readiness::degraded: res.body() = R"({"status":"degraded","store":"local"})"; break;
            case readiness::not_ready:
                res.result(bhttp::status::service_unavailable);
                res.body() =
                    R"({"status":"not_ready","reason":"the rate-limit store cannot decide yet (not connected, its script not loaded, or a Cluster slot without a ready node), or the proxy listener waits for it at start"})";
                break;
        }
    } else if (path == "/metrics") {
        res.set(bhttp::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
        res.body() = metrics.scrape();
    } else if (path == "/top") {
        const auto q = target.find('?');
        const std::string_view query = q == target.npos ? std::string_view() : std::string_view(target.substr(q + 1));
        std::size_t n = 20;
        const auto refused = parse_top_query(query, n);
        if (refused.empty()) {
            res.body() = top_body(n, hooks);
        } else {
            res.result(bhttp::status::bad_request);
            res.body() = error_body("bad_request", refused);
        }
    } else if (path == "/upstreams") {
        res.body() = upstreams_body(hooks);
    } else {
        res.result(bhttp::status::not_found);
        res.body() =
            R"({"error":"not_found","message":"try /healthz, /readyz, /metrics, /top, /upstreams, /identities/<kind>/<value> or /overrides"})";
    }
    res.keep_alive(req.keep_alive());
    res.set(bhttp::field::date, http::date_now());
    res.prepare_payload();
    if (req.method() == bhttp::verb::head) res.body().clear();
    return res;
}

// admin.token_file's token: "Authorization: Bearer <token>", compared in constant time (as
// digests, so that neither its length nor its content shows in the timing).
bool authorized(const bhttp::request<bhttp::string_body>& req, const std::string& token) {
    const auto field = req.find(bhttp::field::authorization);
    if (field == req.end()) return false;
    std::string_view v(field->value().data(), field->value().size());
    constexpr std::string_view scheme = "bearer ";
    if (v.size() <= scheme.size() || !base::iequals(v.substr(0, scheme.size()), scheme)) return false;
    v = base::trim(v.substr(scheme.size()));
    unsigned char given[EVP_MAX_MD_SIZE], want[EVP_MAX_MD_SIZE];
    unsigned int n = 0, m = 0;
    if (EVP_Digest(v.data(), v.size(), given, &n, EVP_sha256(), nullptr) != 1 ||
        EVP_Digest(token.data(), token.size(), want, &m, EVP_sha256(), nullptr) != 1 || n != m)
        return false;
    return CRYPTO_memcmp(given, want, n) == 0;
}

bhttp::response<bhttp::string_body> unauthorized(const bhttp::request<bhttp::string_body>& req) {
    bhttp::response<bhttp::string_body> res{bhttp::status::unauthorized, req.version()};
    res.set(bhttp::field::content_type, "application/json");
    const bool presented = req.find(bhttp::field::authorization) != req.end();
    res.set(bhttp::field::www_authenticate,
            presented ? R"(Bearer realm="sluice-admin", error="invalid_token")" : R"(Bearer realm="sluice-admin")");
    res.body() = error_body("unauthorized", presented ? "the bearer token is not admin.token_file's"
                                                      : "this admin request needs Authorization: Bearer <token>");
    res.keep_alive(req.keep_alive());
    res.set(bhttp::field::date, http::date_now());
    res.prepare_payload();
    if (req.method() == bhttp::verb::head) res.body().clear();
    return res;
}

bool api_path(std::string_view path) {
    return path.starts_with("/identities/") || path == "/overrides" || path.starts_with("/overrides/");
}

bhttp::response<bhttp::string_body> from_reply(const bhttp::request<bhttp::string_body>& req, admin_reply r) {
    bhttp::response<bhttp::string_body> res{static_cast<bhttp::status>(r.status), req.version()};
    res.set(bhttp::field::content_type, "application/json");
    if (!r.allow.empty()) res.set(bhttp::field::allow, r.allow);
    res.body() = std::move(r.body);
    res.keep_alive(req.keep_alive());
    res.set(bhttp::field::date, http::date_now());
    res.prepare_payload();
    if (req.method() == bhttp::verb::head) res.body().clear();
    return res;
}

// The answer to a request the admin listener could not read: JSON, then close.
bhttp::response<bhttp::string_body> refusal(const beast::error_code& ec) {
    bhttp::response<bhttp::string_body> res{bhttp::status::bad_request, 11};
    res.set(bhttp::field::content_type, "application/json");
    if (ec == bhttp::error::header_limit) {
        res.result(bhttp::status::request_header_fields_too_large);
        res.body() = error_body("header_too_large", "admin request headers are limited to 16 KiB");
    } else if (ec == bhttp::error::body_limit) {
        res.result(bhttp::status::payload_too_large);
        res.body() = error_body("payload_too_large", "admin request bodies are limited to 64 KiB");
    } else {
        res.body() = error_body("bad_request", "malformed request");
    }
    res.keep_alive(false);
    res.set(bhttp::field::date, http::date_now());
    res.prepare_payload();
    return res;
}

}  // namespace

// One admin connection, in the server's list from accept until it ends or make_room()
// closes it. Waiting for another request moves it to the back: the front has waited longest.
class admin_server::connection {
public:
    connection(tcp::socket socket, std::list<connection*>& open)
        : stream(std::move(socket)), list_(open), place_(open.insert(open.end(), this)) {}
    ~connection() { unlist(); }
    connection(const connection&) = delete;
    connection& operator=(const connection&) = delete;

    void waiting() {
        if (listed_) list_.splice(list_.end(), list_, place_);
    }
    void unlist() {
        if (listed_) list_.erase(place_);
        listed_ = false;
    }
    // Leaves the list at once (the cap counts listed connections); the pending operation
    // completes with operation_aborted and the coroutine ends.
    void evict() {
        unlist();
        stream.close();
    }
    // After an answer that closes: stop sending, then drain what the client still sends (a
    // body not read, a header past the limit) for a bounded time and amount. Closing with
    // unread input would send a reset, which can discard the answer before the client reads it.
    asio::awaitable<void> linger() {
        beast::error_code ec;
        stream.socket().shutdown(tcp::socket::shutdown_send, ec);
        buffer.clear();
        stream.expires_after(linger_time);
        for (std::size_t discarded = 0; discarded < linger_bytes;) {
            auto [rec, n] = co_await stream.async_read_some(buffer.prepare(linger_read_bytes), use_tuple);
            if (rec) break;
            discarded += n;
        }
    }

    beast::tcp_stream stream;
    beast::flat_buffer buffer;

private:
    std::list<connection*>& list_;
    std::list<connection*>::iterator place_;
    bool listed_ = true;
};

asio::awaitable<bhttp::response<bhttp::string_body>> admin_server::respond(
    const bhttp::request<bhttp::string_body>& req, const std::string& peer) {
    const admin_hooks hooks{metrics_, ready_, reload_, offenders_, upstreams_};
    const auto target = req.target();
    const std::string_view path(target.data(), std::min(target.size(), target.find('?')));
    if (settings_) {
        const auto& s = settings_();
        const bool open = std::find(s.open.begin(), s.open.end(), path) != s.open.end();
        if (!s.token.empty() && !open && !authorized(req, s.token)) {
            metrics_.admin_unauthorized();
            spdlog::info("admin: {} {} from {} refused 401", std::string_view(req.method_string()), path, peer);
            co_return unauthorized(req);
        }
    }
    if (api_ && api_path(path)) {
        const auto q = target.find('?');
        const admin_request ar{req.method(), path,
                               q == target.npos ? std::string_view() : std::string_view(target.substr(q + 1)),
                               req.body(), peer};
        auto reply = co_await api_(ar);
        co_return from_reply(req, std::move(reply));
    }
    co_return answer(req, hooks);
}

asio::awaitable<void> admin_server::serve(std::unique_ptr<connection> conn) {
    auto& stream = conn->stream;
    boost::system::error_code peer_ec;
    const auto remote = stream.socket().remote_endpoint(peer_ec);
    const std::string peer = peer_ec ? std::string("?") : remote.address().to_string();
    for (bool first = true;; first = false) {
        bhttp::request_parser<bhttp::string_body> parser;
        parser.header_limit(max_header_bytes);
        parser.body_limit(max_body_bytes);
        stream.expires_after(first ? limits_.header_timeout : limits_.idle_timeout);
        auto [ec, n] = co_await bhttp::async_read(stream, conn->buffer, parser, use_tuple);
        if (ec == bhttp::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::eof ||
            ec == asio::error::connection_reset || ec == asio::error::operation_aborted)
            break;
        bhttp::response<bhttp::string_body> res;
        if (ec) {
            res = refusal(ec);
        } else {
            res = co_await respond(parser.get(), peer);
        }
        stream.expires_after(limits_.header_timeout);
        auto [wec, wn] = co_await bhttp::async_write(stream, res, use_tuple);
        if (wec) co_return;
        if (!res.keep_alive()) {
            co_await conn->linger();
            co_return;
        }
        conn->waiting();
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

void admin_server::make_room() {
    open_.front()->evict();
    ++evicted_;
    spdlog::debug("admin listener full: closed the connection waiting longest");
    const auto now = std::chrono::steady_clock::now();
    if (now < next_eviction_log_) return;
    next_eviction_log_ = now + eviction_log_interval;
    spdlog::warn("admin listener: {} connections open, closing those waiting longest to admit new ones ({} so far)",
                 limits_.max_connections, evicted_);
}

admin_server::admin_server(asio::io_context& ioc, const tcp::endpoint& listen, metrics::registry& metrics,
                           std::function<readiness()> ready, std::function<app::reload_result()> reload,
                           std::function<std::vector<limit::offender>()> offenders,
                           std::function<std::vector<upstream::pool_status>()> upstreams, admin_limits limits,
                           admin_settings settings, admin_handler api)
    : ioc_(ioc),
      acceptor_(ioc),
      metrics_(metrics),
      ready_(std::move(ready)),
      reload_(std::move(reload)),
      offenders_(std::move(offenders)),
      upstreams_(std::move(upstreams)),
      limits_(limits),
      settings_(std::move(settings)),
      api_(std::move(api)) {
    acceptor_.open(listen.protocol());
    acceptor_.set_option(asio::socket_base::reuse_address(true));
    acceptor_.bind(listen);
    acceptor_.listen();
}

// Connections still open are destroyed with the io_context, after this: they must not
// reach back into open_.
admin_server::~admin_server() {
    while (!open_.empty()) open_.front()->unlist();
}

void admin_server::start() {
    asio::co_spawn(
        ioc_,
        [this]() -> asio::awaitable<void> {
            for (;;) {
                auto [ec, socket] = co_await acceptor_.async_accept(use_tuple);
                if (!acceptor_.is_open()) co_return;
                if (ec) {
                    // Out of descriptors (or a transient error): back off instead of spinning.
                    asio::steady_timer pause(ioc_, std::chrono::milliseconds(50));
                    co_await pause.async_wait(use_tuple);
                    continue;
                }
                if (!open_.empty() && open_.size() >= limits_.max_connections) make_room();
                asio::co_spawn(ioc_, serve(std::make_unique<connection>(std::move(socket), open_)),
                               [](const std::exception_ptr& e) {
                                   if (e) spdlog::warn("admin connection ended by an exception");
                               });
            }
        },
        [](const std::exception_ptr& e) {
            if (e) spdlog::error("admin listener stopped by an exception");
        });
}

void admin_server::stop() {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
}

}  // namespace sluice::app
