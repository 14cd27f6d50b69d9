// sluice: a rate-limiting HTTP reverse proxy.
//
// Exit codes: 0 clean stop (or --check/--help/--version succeeded), 1 invalid
// configuration or start-up failure, 2 bad command line.
#include "app/gateway.hpp"
#include "config/config.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <boost/program_options.hpp>

#include <malloc.h>

#include <csignal>
#include <iostream>

namespace po = boost::program_options;

int main(int argc, char** argv) {
    // Buffers of 64 KiB and more (a body's pieces, a read-ahead) are mapped for their use and
    // unmapped after: what a burst of uploads held goes back to the system once they stream on,
    // where glibc's heap would keep it (its own threshold rises to 32 MiB as blocks are freed).
    // Costs a mapping and its page faults per such buffer: only bodies larger than a piece.
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
    // Until the gateway installs its reload handler, a SIGHUP (a deploy script reloading a
    // moment too early) must not kill the process: there is nothing to reload yet.
    std::signal(SIGHUP, SIG_IGN);
    std::signal(SIGUSR1, SIG_IGN);  // likewise a log rotation's SIGUSR1
    std::signal(SIGPIPE, SIG_IGN);
    po::options_description opts("Usage: sluice --config FILE [options]\n\nOptions");
    opts.add_options()("config,c", po::value<std::string>()->value_name("FILE"), "configuration file (YAML)")(
        "check", "validate the configuration, print the first error, and exit")(
        "threads,t", po::value<unsigned>()->value_name("N"), "worker threads (overrides server.threads; 0 = cores)")(
        "log-level,l", po::value<std::string>()->value_name("LEVEL"),
        "trace, debug, info, warn, error or off (overrides log.level)")("version,v", "print the version and exit")(
        "help,h", "print this help and exit");
    po::variables_map vm;
    try {
        po::store(po::parse_command_line(argc, argv, opts), vm);
        po::notify(vm);
    } catch (const po::error& e) {
        std::cerr << "sluice: " << e.what() << "\n\n" << opts;
        return 2;
    }
    if (vm.count("help")) {
        std::cout << "sluice " << SLUICE_VERSION << ": a rate-limiting HTTP reverse proxy\n\n"
                  << opts
                  << "\nExamples:\n"
                     "  sluice --config conf/sluice.yaml            run\n"
                     "  sluice --config conf/sluice.yaml --check    validate, e.g. before a reload\n\n"
                     "Signals: SIGTERM/SIGINT stop accepting, finish in-flight requests (up to\n"
                     "server.drain_timeout) and exit; SIGHUP re-reads the config file (as does\n"
                     "POST /reload on the admin listener).\n\n"
                     "Exit codes: 0 ok, 1 invalid configuration or start-up failure, 2 bad command line.\n";
        return 0;
    }
    if (vm.count("version")) {
        std::cout << "sluice " << SLUICE_VERSION << "\n";
        return 0;
    }
    if (!vm.count("config")) {
        std::cerr << "sluice: --config FILE is required\n\n" << opts;
        return 2;
    }

    std::shared_ptr<const sluice::config::config> cfg;
    try {
        cfg = sluice::config::load_file(vm["config"].as<std::string>());
    } catch (const sluice::config::config_error& e) {
        std::cerr << e.what() << "\n";
        return 1;
    }
    if (vm.count("check")) {
        // Everything start-up builds from the file (JWT keys, secrets, routes) is built here too.
        if (auto why = sluice::app::check_config(cfg); !why.empty()) {
            std::cerr << vm["config"].as<std::string>() << ": " << why << "\n";
            return 1;
        }
        std::cout << vm["config"].as<std::string>() << ": ok\n";
        return 0;
    }

    auto logger = spdlog::stderr_color_mt("sluice");
    spdlog::set_default_logger(logger);
    auto level = vm.count("log-level") ? vm["log-level"].as<std::string>() : cfg->log.level;
    auto parsed = spdlog::level::from_str(level);
    if (parsed == spdlog::level::off && level != "off") {
        std::cerr << "sluice: unknown log level '" << level << "'\n";
        return 2;
    }
    spdlog::set_level(parsed);
    return sluice::app::run_server(cfg, vm.count("threads") ? vm["threads"].as<unsigned>() : 0);
}
