// The store interface: where limit state lives (docs/design.md, "Limits and the data model").
//
// One call carries every key of a request, so a store can decide them atomically (the
// MemoryStore under its stripe locks, Redis in one EVALSHA) or, later, split them by
// cluster node without changing callers. Envoy's rate-limit client has the same three
// answers: allowed, over limit (both in `decision`), or error.
//
// Thread: a store handle is used by one worker thread; the MemoryStore behind several
// handles is shared and locks internally.
#pragma once

#include "identity/kind.hpp"
#include "limit/decide.hpp"

#include <boost/asio/awaitable.hpp>

#include <array>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace sluice::limit {

using digest = std::array<std::uint8_t, 16>;  // a keyed hash of an identifier

struct store_key {
    identity::kind kind = identity::kind::ip;
    digest id{};
    std::span<const tier> tiers;
    // The most identifiers of this kind the memory store holds (policies.<name>.max_values),
    // evicting its least recently used one beyond; 0: store.memory.max_keys alone bounds them.
    std::uint32_t max_values = 0;
};

struct check_request {
    std::span<const store_key> keys;
    std::int64_t cost = 1;
    bool count_rejected = false;  // a denial is counted too (limit::decide)
    std::uint64_t lease = 0;      // the slot an admission takes in each concurrency tier (0: none), below 2^53
    bool want_receipt = false;    // an admission returns its receipt (check_result::taken), for store::take_back
    bool query = false;           // check only: nothing is written (the admin's view of one identifier)
    bool uncached = false;        // never answered from a local cache of denials: its tiers' state may shrink
                                  // (charges settled at the response give back)
};

// Lease ids for the slots of concurrency tiers: random (gateways draw them independently),
// never 0, below 2^53 (the Redis script's numbers are doubles).
class lease_ids {
public:
    lease_ids() {
        std::random_device rd;
        std::seed_seq seed{rd(), rd(), rd(), rd()};
        gen_.seed(seed);
    }
    std::uint64_t next() {
        std::uint64_t id = 0;
        while (id == 0) id = gen_() >> 11;
        return id;
    }

private:
    std::mt19937_64 gen_;
};

// What becomes of the concurrency slots a request holds (limit::release_lease, renew_lease).
enum class lease_change { renew, release };

struct check_result {
    enum class status { ok, error };
    status state = status::ok;
    decision verdict;   // valid when ok
    std::string error;  // when error: short, for logs and metrics
    receipt taken;      // ok, admitted and want_receipt: what the commit wrote
};

class store {
public:
    virtual ~store() = default;
    // Answers at once when it can without waiting (MemoryStore: always), else nullopt.
    virtual std::optional<check_result> try_check(const check_request& r) = 0;
    // Answers after a round trip. Only called when try_check answered nullopt.
    virtual boost::asio::awaitable<check_result> check(check_request r) = 0;
    // Renews or gives back the slots of lease r.lease in r's concurrency tiers, without
    // waiting: a change the store misses (Redis unreachable) leaves a slot to lapse at its lease.
    virtual void change_lease(const check_request& r, lease_change c) = 0;
    // Takes back `amount` (0 < amount <= r.cost) of the admission of `r` that returned
    // receipt `rc`, from its rate tiers: the counts it added to its buckets, its log entries,
    // the emission interval it added to a gcra tier (less what commits since absorbed of it,
    // never behind the present: limit::take_back), and its min_interval mark if no admission
    // followed. Exact whatever ran since (gcra: never more admitted than exact); leases are
    // left to change_lease. False when the store could not (its outcome is then unknown), or
    // for an amount below 1; an amount above r.cost takes r.cost.
    virtual boost::asio::awaitable<bool> take_back(check_request r, receipt rc, std::int64_t amount) = 0;
    // Forgets the state of r's tiers for r's identifiers (the admin's DELETE /identities):
    // they start afresh (a concurrency tier's slots are freed: requests in flight then hold
    // none). False when the store could not.
    virtual boost::asio::awaitable<bool> reset(check_request r) = 0;
    // Identifiers held now (for the keys-held gauge); any thread.
    virtual std::size_t keys_held() const = 0;
    // A new configuration was installed: drop anything cached from the old one (the
    // Redis store's local deny cache). The owning worker's thread.
    virtual void on_reload() {}
    // Whether the store can answer now (for /readyz); any thread.
    virtual bool ready() const { return true; }
    // Stop background work (connections) so the worker's loop can finish. Its thread.
    virtual void stop() {}
};

}  // namespace sluice::limit
