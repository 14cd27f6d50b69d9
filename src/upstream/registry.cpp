#include "upstream/registry.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/ip/tcp.hpp>

#include <algorithm>
#include <stdexcept>

namespace sluice::upstream {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

bool is_name(const std::string& host) {
    boost::system::error_code ec;
    asio::ip::make_address(host, ec);
    return static_cast<bool>(ec);
}

namespace {

std::vector<tcp::endpoint> unique(const tcp::resolver::results_type& found) {
    std::vector<tcp::endpoint> out;
    for (const auto& r : found)
        if (std::find(out.begin(), out.end(), r.endpoint()) == out.end()) out.push_back(r.endpoint());
    return out;
}

// The endpoints a url has in `m` now.
std::vector<tcp::endpoint> endpoints_in(const members& m, const config::upstream_server_config& c) {
    std::vector<tcp::endpoint> out;
    for (const auto& s : m.servers)
        if (s->url == c.url && s->weight == c.weight) out.push_back(s->endpoint);
    return out;
}

// The members of `p` for `found` (each server config's endpoints, in config order), with
// the servers that stay taken over from `from`.
std::vector<std::shared_ptr<server>> servers_for(const config::upstream_config& cfg,
                                                 const std::vector<std::vector<tcp::endpoint>>& found,
                                                 const pool* from) {
    std::vector<std::shared_ptr<server>> out;
    for (std::size_t i = 0; i < cfg.servers.size(); ++i)
        for (const auto& ep : found[i]) {
            auto s = from ? from->take_over(cfg.servers[i], ep) : nullptr;
            out.push_back(s ? std::move(s) : std::make_shared<server>(cfg.servers[i], ep));
        }
    return out;
}

std::string list(const std::vector<tcp::endpoint>& eps) {
    std::string out;
    for (const auto& ep : eps) {
        if (!out.empty()) out += ", ";
        out += ep.address().to_string();
    }
    return out;
}

}  // namespace

pool_list registry::build(const std::shared_ptr<const config::config>& cfg) const {
    pool_list out;
    asio::io_context local;
    tcp::resolver resolver(local);
    for (const auto& u : cfg->upstreams) {
        auto p = std::make_shared<pool>(cfg, u);
        const pool* old = nullptr;
        for (const auto& running : pools_)
            if (running->name() == u.name) old = running.get();
        if (old) p->carry_counts(*old);
        std::vector<std::vector<tcp::endpoint>> found;
        for (const auto& s : u.servers) {
            if (!is_name(s.url.host)) {
                found.push_back({tcp::endpoint(asio::ip::make_address(s.url.host), s.url.port)});
                continue;
            }
            boost::system::error_code ec;
            auto results = resolver.resolve(s.url.host, std::to_string(s.url.port), ec);
            if (!ec && !results.empty()) {
                found.push_back(unique(results));
                continue;
            }
            auto kept = old ? endpoints_in(*old->current(), s) : std::vector<tcp::endpoint>{};
            const auto why = ec ? ec.message() : std::string("no address");
            if (kept.empty())
                throw std::runtime_error(s.at + ": cannot resolve upstream host " + s.url.host + ": " + why);
            spdlog::warn("{}: cannot resolve upstream host {} ({}): keeping {}", s.at, s.url.host, why, list(kept));
            found.push_back(std::move(kept));
        }
        p->publish(make_members(servers_for(u, found, old)));
        out.push_back(std::move(p));
    }
    return out;
}

void registry::install(pool_list pools) {
    pools_ = std::move(pools);
    due_.clear();
    resolving_.clear();
    const auto now = clock::now();
    bool any = false;
    for (const auto& p : pools_) {
        for (const auto& s : p->cfg().servers) any = any || is_name(s.url.host);
        due_[p.get()] = now + p->cfg().resolve_every;
    }
    if (any && !stopped_) {
        timer_.cancel();
        tick();
    }
    if (!stopped_) health_.start(pools_);
}

void registry::stop() {
    stopped_ = true;
    timer_.cancel();
    health_.stop();
}

void registry::tick() {
    timer_.expires_after(std::chrono::seconds(1));
    timer_.async_wait([this](boost::system::error_code ec) {
        if (ec || stopped_) return;
        const auto now = clock::now();
        for (const auto& p : pools_) {
            auto& due = due_[p.get()];
            if (now < due || resolving_.count(p.get()) != 0) continue;  // one round at a time per pool
            due = now + p->cfg().resolve_every;
            resolve(p);
        }
        tick();
    });
}

// Resolves every name of `p` again, in the background; once all have answered, publishes
// new members if an address came or went. A name that fails keeps its addresses.
void registry::resolve(const std::shared_ptr<pool>& p) {
    struct round {
        std::shared_ptr<pool> p;
        std::shared_ptr<const members> before;
        std::vector<std::vector<tcp::endpoint>> found;
        std::size_t waiting = 0;
        std::vector<std::unique_ptr<tcp::resolver>> resolvers;
    };
    auto r = std::make_shared<round>();
    r->p = p;
    r->before = p->current();
    const auto& cfg = p->cfg();
    r->found.resize(cfg.servers.size());
    auto finish = [this, r] {
        if (stopped_) return;
        resolving_.erase(r->p.get());
        auto servers = servers_for(r->p->cfg(), r->found, r->p.get());
        bool same = servers.size() == r->before->servers.size();
        for (std::size_t i = 0; same && i < servers.size(); ++i) same = servers[i] == r->before->servers[i];
        if (same) return;
        std::vector<tcp::endpoint> now;
        now.reserve(servers.size());
        for (const auto& s : servers) now.push_back(s->endpoint);
        spdlog::info("upstream {}: the servers are now {}", r->p->name(), list(now));
        r->p->publish(make_members(std::move(servers)));
    };
    for (std::size_t i = 0; i < cfg.servers.size(); ++i) {
        const auto& s = cfg.servers[i];
        r->found[i] = endpoints_in(*r->before, s);
        if (!is_name(s.url.host)) continue;
        ++r->waiting;
        r->resolvers.push_back(std::make_unique<tcp::resolver>(ioc_));
        r->resolvers.back()->async_resolve(
            s.url.host, std::to_string(s.url.port),
            [r, i, finish](boost::system::error_code ec, const tcp::resolver::results_type& results) {
                if (!ec && !results.empty())
                    r->found[i] = unique(results);
                else if (ec != asio::error::operation_aborted)
                    spdlog::warn("upstream {}: resolving {} again failed: {}", r->p->name(),
                                 r->p->cfg().servers[i].url.host, ec ? ec.message() : "no address");
                if (--r->waiting == 0 && ec != asio::error::operation_aborted) finish();
            });
    }
    if (r->waiting > 0) resolving_.insert(p.get());
}

}  // namespace sluice::upstream
