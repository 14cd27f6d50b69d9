#include "identity/kind.hpp"

#include <array>
#include <atomic>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace sluice::identity {

namespace {

// Texts are only added, never removed or moved (a deque keeps its elements in place), so
// to_string() reads a slot without a lock once kind_of() has published it.
struct registry {
    std::mutex mu;
    std::deque<std::string> texts;
    std::unordered_map<std::string_view, std::uint16_t> ids;
    std::array<std::atomic<const char*>, max_kinds> slots{};

    registry() {
        for (const char* t : {"ip", "user", "upstream"}) add(t);
    }
    std::uint16_t add(std::string_view text) {
        const auto id = static_cast<std::uint16_t>(texts.size());
        const std::string& stored = texts.emplace_back(text);
        ids.emplace(stored, id);
        slots[id].store(stored.c_str(), std::memory_order_release);
        return id;
    }
};

registry& the_registry() {
    static registry r;
    return r;
}

}  // namespace

kind kind_of(std::string_view text) {
    registry& r = the_registry();
    const std::lock_guard lock(r.mu);
    if (const auto it = r.ids.find(text); it != r.ids.end()) return static_cast<kind>(it->second);
    if (r.texts.size() >= max_kinds)
        throw std::length_error("too many identifier kinds in one process (at most " + std::to_string(max_kinds) +
                                "): restart it");
    return static_cast<kind>(r.add(text));
}

const char* to_string(kind k) {
    const auto id = static_cast<std::size_t>(k);
    if (id >= max_kinds) return "";
    const char* t = the_registry().slots[id].load(std::memory_order_acquire);
    return t != nullptr ? t : "";
}

}  // namespace sluice::identity
