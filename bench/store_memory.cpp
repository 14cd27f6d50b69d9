// Memory used by the embedded store (sluice::store::memory_store) per identifier.
//
// For N identifiers (random 16-byte digests, as the keyed hash of a client address would
// be) it sends one request each through try_check() against 1, 3 and 10 tiers, and reports
// the heap growth (glibc mallinfo2().uordblks: bytes in allocated chunks, chunk headers
// included) and the resident set growth (/proc/self/statm) per identifier and per
// identifier per tier. Then, with store.memory.max_keys = 10000, it checks that
// keys_held() stays within the bound while N identifiers arrive, and that evictions()
// counts the rest.
//
// Each scenario runs in its own forked child, so one scenario's freed heap does not hide
// the next one's RSS growth. The store's clock is frozen for the whole run, so no state
// expires (and is swept) while the identifiers are inserted.
//
// Usage: store_memory [N]      (default N = 100000)
#include "config/config.hpp"
#include "limit/decide.hpp"
#include "limit/store.hpp"
#include "store/memory_store.hpp"

#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

using sluice::config::algorithm;
using sluice::config::duration;
using sluice::config::tier_config;
namespace config = sluice::config;
namespace limit = sluice::limit;

struct spec {
    algorithm algo;
    std::int64_t limit;
    std::int64_t per_ms;
    std::int64_t precision_ms;  // sliding (fixed: = per)
    std::int64_t burst;         // gcra
    const char* text;
};

// The first three are conf/sluice.yaml's default ip tiers.
const std::vector<spec> all_specs = {
    {algorithm::sliding, 10, 1'000, 100, 0, "sliding 10/1s precision 100ms"},
    {algorithm::fixed, 120, 60'000, 60'000, 0, "fixed 120/1m"},
    {algorithm::sliding, 240, 3'600'000, 60'000, 0, "sliding 240/1h precision 1m"},
    {algorithm::gcra, 5, 1'000, 0, 10, "gcra 5/1s burst 10"},
    {algorithm::log, 5, 60'000, 0, 0, "log 5/1m"},
    {algorithm::fixed, 1'000, 3'600'000, 3'600'000, 0, "fixed 1000/1h"},
    {algorithm::sliding, 10'000, 86'400'000, 3'600'000, 0, "sliding 10000/1d precision 1h"},
    {algorithm::gcra, 100, 60'000, 0, 100, "gcra 100/1m burst 100"},
    {algorithm::log, 20, 10'000, 0, 0, "log 20/10s"},
    {algorithm::sliding, 100, 10'000, 1'000, 0, "sliding 100/10s precision 1s"},
};

limit::tier make_tier(const spec& s) {
    tier_config c;
    c.kind = "ip";
    c.limit = s.limit;
    c.per = duration{s.per_ms};
    c.algo = s.algo;
    c.precision = duration{s.algo == algorithm::fixed || s.algo == algorithm::sliding ? s.precision_ms : 0};
    c.burst = s.burst;
    std::string id =
        std::string("bench/ip/") + std::string(config::to_string(s.algo)) + "/" + std::to_string(s.per_ms) + "ms/" +
        std::to_string(s.algo == algorithm::gcra ? s.burst : s.precision_ms) + "/" + std::to_string(s.limit);
    return limit::tier::from(c, id, "ip-" + std::to_string(s.per_ms) + "ms");
}

std::size_t heap_in_use() { return mallinfo2().uordblks; }

std::size_t rss_bytes() {
    std::ifstream f("/proc/self/statm");
    std::size_t size = 0, resident = 0;
    f >> size >> resident;
    return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

std::vector<limit::digest> random_digests(std::size_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<limit::digest> out(n);
    for (auto& d : out)
        for (std::size_t i = 0; i < d.size(); i += 8) {
            const std::uint64_t v = rng();
            for (std::size_t j = 0; j < 8; ++j) d[i + j] = static_cast<std::uint8_t>(v >> (8 * j));
        }
    return out;
}

struct outcome {
    std::size_t keys_held = 0;
    std::uint64_t evictions = 0;
    std::size_t denied = 0;
    long long heap = 0;  // bytes
    long long rss = 0;   // bytes
};

// Sends one request (cost 1) for each of `ids` against `tiers`, into a fresh store.
outcome run(const std::vector<limit::digest>& ids, const std::vector<limit::tier>& tiers, std::size_t max_keys) {
    const limit::usec frozen = 1'700'000'000'000'000;  // a fixed Unix time in microseconds
    outcome o;
    malloc_trim(0);
    const std::size_t heap0 = heap_in_use();
    const std::size_t rss0 = rss_bytes();
    {
        sluice::store::memory_store store(max_keys, [frozen] { return frozen; });
        std::size_t max_seen = 0;
        for (const auto& id : ids) {
            const limit::store_key key{'i', id, tiers};
            const auto result = store.try_check(limit::check_request{std::span(&key, 1), 1});
            if (!result || result->state != limit::check_result::status::ok) {
                std::fprintf(stderr, "store_memory: try_check failed\n");
                std::exit(1);
            }
            if (!result->verdict.allowed) ++o.denied;
            if (max_keys < ids.size()) max_seen = std::max(max_seen, store.keys_held());
        }
        o.keys_held = store.keys_held();
        o.evictions = store.evictions();
        o.heap = static_cast<long long>(heap_in_use()) - static_cast<long long>(heap0);
        o.rss = static_cast<long long>(rss_bytes()) - static_cast<long long>(rss0);
        if (max_keys < ids.size() && max_seen > max_keys) {
            std::fprintf(stderr, "store_memory: keys_held() reached %zu > max_keys %zu\n", max_seen, max_keys);
            std::exit(1);
        }
    }
    return o;
}

// Runs `fn` in a forked child that writes an outcome into a pipe.
template <class Fn>
outcome in_child(Fn fn) {
    int fds[2];
    if (pipe(fds) != 0) std::exit(1);
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid < 0) std::exit(1);
    if (pid == 0) {
        close(fds[0]);
        const outcome o = fn();
        const bool ok = write(fds[1], &o, sizeof o) == static_cast<ssize_t>(sizeof o);
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    outcome o;
    const bool ok = read(fds[0], &o, sizeof o) == static_cast<ssize_t>(sizeof o);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!ok || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "store_memory: scenario failed\n");
        std::exit(1);
    }
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    const std::size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 100'000;
    if (n == 0) {
        std::fprintf(stderr, "usage: store_memory [N]\n");
        return 2;
    }
    // Digests and tiers exist before any measurement starts (fork copies them).
    const auto ids = random_digests(n, 42);
    std::vector<limit::tier> tiers;
    for (const auto& s : all_specs) tiers.push_back(make_tier(s));
    const auto first = [&](std::size_t k) { return std::vector<limit::tier>(tiers.begin(), tiers.begin() + k); };

    // The bound is split evenly over the stripes and the digests do not fill them evenly:
    // leave room so that nothing is evicted (the default store.memory.max_keys, or 4 N).
    const std::size_t roomy = std::max<std::size_t>(1'000'000, 4 * n);
    std::printf(
        "embedded store memory: %zu identifiers (random 16-byte digests), one request each, "
        "store.memory.max_keys = %zu (nothing evicted), frozen clock\n",
        n, roomy);
    std::printf(
        "heap = glibc mallinfo2().uordblks growth (allocated chunks incl. headers); "
        "RSS = /proc/self/statm growth; each scenario in its own process\n");
    std::printf("tiers, in order: ");
    for (std::size_t i = 0; i < all_specs.size(); ++i) std::printf("%s%s", i ? "; " : "", all_specs[i].text);
    std::printf("\n\n");
    std::printf("%-5s | %8s | %8s | %13s | %18s | %7s | %12s | %17s\n", "tiers", "ids held", "heap MiB",
                "heap bytes/id", "heap bytes/id/tier", "RSS MiB", "RSS bytes/id", "RSS bytes/id/tier");
    std::printf(
        "------+----------+----------+---------------+--------------------+---------+--------------+------------------"
        "\n");
    for (const std::size_t k : {std::size_t{1}, std::size_t{3}, std::size_t{10}}) {
        const auto t = first(k);
        const outcome o = in_child([&] { return run(ids, t, roomy); });
        if (o.denied != 0 || o.keys_held != n) {
            std::fprintf(stderr, "store_memory: %zu tiers: %zu denied, %zu held (expected 0 and %zu)\n", k, o.denied,
                         o.keys_held, n);
            return 1;
        }
        const double per_id_heap = static_cast<double>(o.heap) / static_cast<double>(n);
        const double per_id_rss = static_cast<double>(o.rss) / static_cast<double>(n);
        std::printf("%-5zu | %8zu | %8.1f | %13.0f | %18.0f | %7.1f | %12.0f | %17.0f\n", k, o.keys_held,
                    static_cast<double>(o.heap) / (1024.0 * 1024.0), per_id_heap, per_id_heap / static_cast<double>(k),
                    static_cast<double>(o.rss) / (1024.0 * 1024.0), per_id_rss, per_id_rss / static_cast<double>(k));
    }

    const std::size_t bound = 10'000;
    std::printf("\neviction: store.memory.max_keys = %zu, %zu identifiers, 3 tiers\n", bound, n);
    const outcome e = in_child([&] { return run(ids, first(3), bound); });
    const std::size_t per_stripe = std::max<std::size_t>(1, bound / sluice::store::memory_store::stripe_count);
    std::printf("  keys_held() = %zu (never above %zu during the run; %zu stripes x %zu per stripe = %zu)\n",
                e.keys_held, bound, sluice::store::memory_store::stripe_count, per_stripe,
                sluice::store::memory_store::stripe_count * per_stripe);
    std::printf("  evictions() = %llu; keys_held + evictions = %llu (identifiers sent: %zu)\n",
                static_cast<unsigned long long>(e.evictions),
                static_cast<unsigned long long>(e.keys_held + e.evictions), n);
    std::printf("  heap held at the end: %.2f MiB = %.0f bytes per identifier held\n",
                static_cast<double>(e.heap) / (1024.0 * 1024.0),
                e.keys_held ? static_cast<double>(e.heap) / static_cast<double>(e.keys_held) : 0.0);
    const bool ok = e.keys_held <= bound && e.keys_held + e.evictions == n;
    std::printf("  %s\n", ok ? "OK: bound respected and every identifier not held was counted as evicted"
                             : "FAILED: bound exceeded or evictions do not account for the identifiers not held");
    return ok ? 0 : 1;
}
