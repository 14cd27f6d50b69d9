#include "app/reload.hpp"

namespace sluice::app {

namespace {

// A file cut short (a full disk, an in-place writer that stopped for longer than the
// stable read waits) still parses: YAML has no terminator. One that would remove every
// policy or route of the running config is taken for such a file rather than for an
// intent to stop limiting.
std::string truncated(const config::config& next, const config::config& running) {
    auto lost = [](const char* what, std::size_t before) {
        return "the file has no " + std::string(what) + " while the running configuration has " +
               std::to_string(before) +
               "; refusing a reload that would turn limiting off (is the file complete?); "
               "restart Sluice to run without them";
    };
    if (next.policies.empty() && !running.policies.empty()) return lost("policies", running.policies.size());
    if (next.routes.empty() && !running.routes.empty()) return lost("routes", running.routes.size());
    const auto& keys = running.clients.api_keys;
    if (keys && !keys->keys.empty() && next.clients.api_keys && next.clients.api_keys->keys.empty()) {
        return "the API key registry " + next.clients.api_keys->file + " has no keys while the running one has " +
               std::to_string(keys->keys.size()) + "; refusing a reload that would refuse every key (is the file " +
               "complete?); restart Sluice to run with an empty registry";
    }
    return {};
}

}  // namespace

reload_result load_for_reload(const config::config& running) {
    std::shared_ptr<const config::config> loaded;
    try {
        loaded = config::load_file(running.source);
    } catch (const config::config_error& e) {
        return {false, e.what(), nullptr, {}};
    }
    if (auto why = truncated(*loaded, running); !why.empty()) return {false, running.source + ": " + why, nullptr, {}};
    auto next = std::make_shared<config::config>(*loaded);
    std::vector<std::string> changed;
    for (const auto& k : config::restart_only_keys()) {
        if (k.keep(*next, running)) changed.push_back(k.key);
    }
    // admin.listen is taken at start: a file that moves it to loopback and drops the token
    // would leave the running listener open without one.
    if (next->admin.token.empty() && !running.admin.token.empty()) {
        boost::system::error_code ec;
        const auto a = boost::asio::ip::make_address(next->admin.listen.host, ec);
        if (ec || !a.is_loopback())
            return {false,
                    running.source +
                        ": admin.token_file: the running admin listener is not on loopback; it keeps its token "
                        "until a restart",
                    nullptr,
                    {}};
    }
    return {true, "reloaded " + running.source, next, std::move(changed)};
}

}  // namespace sluice::app
