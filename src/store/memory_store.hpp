// The embedded store: every identifier's state in this process, striped over locks.
//
// A request's keys are locked in ascending stripe order, so its ip and user tiers are
// decided atomically with no global lock. Expiry and eviction are only garbage
// collection: an identifier whose longest window has passed is dropped (it would start
// afresh anyway); when more than max_keys identifiers are held, the least recently used
// identifier of the full stripe is evicted and starts afresh on its next request. A key
// with max_values (a kind whose values the caller chooses) is also bounded within its kind:
// each stripe holds at most ceil(max_values / stripe_count) identifiers of the kind, and a new
// one kept beyond (an admitted request's; a refused one keeps none) evicts the stripe's least
// recently used identifier of that kind (counted per kind: kind_evictions()).
//
// Thread: try_check() and keys_held() from any thread.
#pragma once

#include "limit/store.hpp"

#include <boost/intrusive/list.hpp>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace sluice::store {

// Unix time in microseconds: the wall clock read once, then advanced by steady_clock, so
// a wall-clock step never moves a window.
std::function<limit::usec()> steady_unix_clock();

class memory_store final : public limit::store {
public:
    static constexpr std::size_t stripe_count = 64;

    explicit memory_store(std::size_t max_keys, std::function<limit::usec()> clock = steady_unix_clock());
    ~memory_store() override;

    std::optional<limit::check_result> try_check(const limit::check_request& r) override;
    boost::asio::awaitable<limit::check_result> check(limit::check_request r) override;
    void change_lease(const limit::check_request& r, limit::lease_change c) override;
    boost::asio::awaitable<bool> take_back(limit::check_request r, limit::receipt rc, std::int64_t amount) override;
    // take_back() without waiting (it never waits here): limit::take_back under the stripe locks,
    // of at most r.cost; false (nothing taken) for an amount below 1.
    bool take_back_now(const limit::check_request& r, const limit::receipt& rc, std::int64_t amount);
    // r's tiers forgotten for r's identifiers (an identifier left with none is dropped).
    boost::asio::awaitable<bool> reset(limit::check_request r) override;
    void reset_now(const limit::check_request& r);
    std::size_t keys_held() const override;
    std::uint64_t evictions() const;
    // Identifiers evicted by their kind's max_values, per kind (kinds that had none are left
    // out). Any thread; takes each stripe's lock in turn (for a scrape, not per request).
    std::vector<std::pair<identity::kind, std::uint64_t>> kind_evictions() const;
    // Drops every identifier whose windows have all passed, one stripe lock at a time.
    // Requests sweep as they go; this frees the memory of a burst when no traffic follows.
    void collect_expired();

private:
    struct map_key {
        limit::digest id;
        identity::kind kind;
        bool operator==(const map_key&) const = default;
    };
    struct map_hash {
        std::size_t operator()(const map_key& k) const;
    };
    struct entry : boost::intrusive::list_base_hook<> {
        map_key key;
        limit::key_state state;
        boost::intrusive::list_member_hook<> kind_hook;  // in its kind's list when the kind is bounded
    };
    using kind_list = boost::intrusive::list<
        entry, boost::intrusive::member_hook<entry, boost::intrusive::list_member_hook<>, &entry::kind_hook>>;
    struct kind_lru {
        kind_list lru;  // least recently used first
        std::uint64_t evictions = 0;
    };
    struct stripe {
        std::mutex mu;
        std::unordered_map<map_key, entry, map_hash> map;
        boost::intrusive::list<entry> lru;                   // least recently used first
        std::unordered_map<identity::kind, kind_lru> kinds;  // bounded kinds' identifiers
        std::size_t ops = 0;
        std::atomic<std::size_t> size{0};
        std::atomic<std::uint64_t> evictions{0};
    };

    static std::size_t stripe_of(const limit::digest& id);
    // A check_request with query set: decide() on copies of the states, nothing written.
    limit::check_result query_now(const limit::check_request& r);
    // Runs fn(now) holding the stripe locks of r's keys, taken in ascending order (so two
    // requests never deadlock), each distinct stripe once.
    template <class Fn>
    void locked(const limit::check_request& r, Fn fn);
    void maintain(stripe& s, limit::usec now);
    // `max_values`: the key's kind's bound (store_key::max_values; 0: none).
    entry& find_or_insert(stripe& s, const map_key& k, limit::usec now, bool& inserted, std::span<entry* const> in_use,
                          std::uint32_t max_values = 0);
    // Evicts `kind`'s least recently used identifiers of the stripe beyond its share of
    // `max_values`, sparing those of `in_use`.
    void trim_kind(stripe& s, identity::kind kind, std::uint32_t max_values, std::span<entry* const> in_use);
    // The most recently used of its stripe and of its kind.
    void touch(stripe& s, entry& e);
    void sweep(stripe& s, limit::usec now);
    void erase(stripe& s, entry& e);

    std::function<limit::usec()> clock_;
    std::size_t max_per_stripe_;
    std::unique_ptr<stripe[]> stripes_;
};

}  // namespace sluice::store
