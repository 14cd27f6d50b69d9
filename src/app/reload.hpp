// Reloading the configuration file: validate, keep what needs a restart, report it.
//
// Thread: the app's main thread.
#pragma once

#include "config/config.hpp"

#include <memory>
#include <string>
#include <vector>

namespace sluice::app {

struct reload_result {
    bool ok = false;
    std::string message;                        // the FILE:LINE:COLUMN error when !ok
    std::shared_ptr<const config::config> cfg;  // the config to install when ok
    std::vector<std::string> restart_required;  // keys that changed but keep their running value
};

// Loads running.source again. Settings that only take effect at start (listen addresses,
// threads, connection limits, the upstream address, the store: config::restart_only_keys(),
// as the schema declares them) keep their running values in the returned config and are
// listed in restart_required, in schema order. A file being rewritten in
// place is waited for (config::read_stable_file): the call may block up to a second a file.
reload_result load_for_reload(const config::config& running);

}  // namespace sluice::app
