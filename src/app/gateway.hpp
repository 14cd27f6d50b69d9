// Runs the gateway: worker threads, the admin listener and signals, start to stop.
//
// Thread: construct and run() on the main thread; run() returns after a clean stop.
#pragma once

#include "config/config.hpp"

#include <memory>
#include <string>

namespace sluice::app {

// Returns the process exit code: 0 after SIGTERM/SIGINT and a drain, 1 if start-up failed.
int run_server(std::shared_ptr<const config::config> cfg, unsigned threads);

// Builds what start-up builds from `cfg` without listening or connecting: "" when it
// would start, else why not.
std::string check_config(std::shared_ptr<const config::config> cfg);

}  // namespace sluice::app
