#include "upstream/pool.hpp"

#include <algorithm>
#include <utility>

namespace sluice::upstream {

namespace {

std::string label_of(const config::upstream_url& url, const std::string& address) {
    boost::system::error_code ec;
    boost::asio::ip::make_address(url.host, ec);
    return ec ? url.authority + " " + address : address;
}

// Passive ejections double eject_for up to this factor.
constexpr std::uint32_t max_doublings = 5;

}  // namespace

void add(server_totals& t, const slot_counters& c) {
    t.requests += c.requests.get();
    t.failures += c.failures.get();
    t.in_flight += c.in_flight.get();
    for (std::size_t k = 0; k < metrics::server_error_kinds; ++k) t.errors[k] += c.errors[k].get();
}

void add(pool_totals& t, const lane_counters& c) {
    for (std::size_t b = 0; b < t.response.size(); ++b) t.response[b] += c.response.counts[b].get();
    t.response_sum_ns += c.response.sum_ns.get();
    t.retries += c.retries.get();
    t.budget_exhausted += c.budget_exhausted.get();
}

std::string address_text(const boost::asio::ip::tcp::endpoint& ep) {
    const auto a = ep.address();
    std::string out;
    if (a.is_v6()) out += '[';
    out += a.to_string();
    if (a.is_v6()) out += ']';
    out += ':';
    out += std::to_string(ep.port());
    return out;
}

server::server(const config::upstream_server_config& c, const boost::asio::ip::tcp::endpoint& ep)
    : url(c.url), weight(c.weight), endpoint(ep), address(address_text(ep)), label(label_of(c.url, address)) {}

unsigned server::effective_weight(std::int64_t now, config::duration slow_start) const {
    if (!available(now)) return 0;
    const unsigned full = weight * 100;
    const auto back = back_at.load(std::memory_order_relaxed);
    // At most about 13 days (2^50 ns): the products below stay within 64 bits.
    const auto ramp = std::min<std::int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(slow_start).count(),
                                             std::int64_t{1} << 50);
    if (back == 0 || ramp <= 0 || now - back >= ramp) return full;
    // From 10% to 100% of the weight, linearly (back_at may be a moment ahead of a
    // worker that saw the ejection end: it starts at 10%).
    const auto part = 10 + std::max<std::int64_t>(0, now - back) * 90 / ramp;
    return std::max<unsigned>(1, static_cast<unsigned>(full * part / 100));
}

std::string server::last_check() const {
    std::lock_guard lock(check_mutex_);
    return last_check_;
}

void server::set_last_check(std::string result) {
    std::lock_guard lock(check_mutex_);
    last_check_ = std::move(result);
}

pool::pool(std::shared_ptr<const config::config> keep, const config::upstream_config& cfg)
    : keep_(std::move(keep)),
      cfg_(&cfg),
      members_(std::make_shared<members>()),
      counts_(std::make_shared<tally<lane_counters, pool_totals>>()) {}

std::shared_ptr<const members> pool::current() const {
    std::lock_guard lock(mutex_);
    return members_;
}

void pool::publish(std::shared_ptr<const members> m) {
    {
        std::lock_guard lock(mutex_);
        members_ = std::move(m);
    }
    version_.fetch_add(1, std::memory_order_acq_rel);
}

bool pool::failed(server& s, clock::time_point at) {
    const auto& h = cfg_->health;
    if (h.eject_after == 0) return false;
    const auto now = ticks(at);
    if (s.ejected_until.load(std::memory_order_relaxed) > now) return false;  // already out
    if (s.failures.fetch_add(1, std::memory_order_relaxed) + 1 < h.eject_after) return false;
    // One ejection at a time in a pool: two workers must not each count the others still in
    // and both eject (a pool of two emptied), nor eject one server twice. A failure path.
    std::lock_guard lock(eject_mutex_);
    if (s.ejected_until.load(std::memory_order_relaxed) > now) return false;
    // Never more than max_ejected_percent of the servers out at once (rounded down), but
    // one of a pool of two or more may always go.
    const auto m = current();
    std::size_t out = 0;
    for (const auto& other : m->servers)
        if (other->ejected_until.load(std::memory_order_relaxed) > now) ++out;
    const std::size_t n = m->servers.size();
    const std::size_t most = std::max<std::size_t>(n >= 2 ? 1 : 0, n * h.max_ejected_percent / 100);
    if (out >= most) return false;
    const auto row = std::min(s.ejections_in_row.fetch_add(1, std::memory_order_relaxed), max_doublings);
    const auto base = std::min<std::int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(h.eject_for).count(),
                                             std::int64_t{1} << 50);  // no overflow when doubled
    const auto span = base << row;
    s.failures.store(0, std::memory_order_relaxed);
    s.ejections.fetch_add(1, std::memory_order_relaxed);
    s.ejected_until.store(now + span, std::memory_order_relaxed);
    s.back_at.store(now + span, std::memory_order_relaxed);
    return true;
}

void pool::succeeded(server& s) {
    // Read first: a healthy server's atomics are then only read, never written.
    if (s.failures.load(std::memory_order_relaxed) != 0) s.failures.store(0, std::memory_order_relaxed);
    if (s.ejections_in_row.load(std::memory_order_relaxed) != 0 &&
        s.ejected_until.load(std::memory_order_relaxed) <= ticks(clock::now()))
        s.ejections_in_row.store(0, std::memory_order_relaxed);
}

std::shared_ptr<server> pool::take_over(const config::upstream_server_config& c,
                                        const boost::asio::ip::tcp::endpoint& ep) const {
    const auto m = current();
    for (const auto& s : m->servers)
        if (s->endpoint == ep && s->url == c.url && s->weight == c.weight) return s;
    return nullptr;
}

std::shared_ptr<const members> make_members(std::vector<std::shared_ptr<server>> servers) {
    auto m = std::make_shared<members>();
    std::vector<std::string> keys;
    std::vector<unsigned> weights;
    for (const auto& s : servers) {
        keys.push_back(s->address);
        weights.push_back(s->weight);
    }
    m->ring = hash_ring(keys, weights);
    m->servers = std::move(servers);
    return m;
}

}  // namespace sluice::upstream
