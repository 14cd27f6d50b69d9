#include "server/access_log.hpp"

#include <spdlog/async.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <chrono>
#include <ctime>

namespace sluice::server {

namespace {

// "2026-11-22T17:55:41.228Z"
std::string iso_time(std::chrono::system_clock::time_point t) {
    using namespace std::chrono;
    const auto ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
    const std::time_t secs = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char buf[32];
    const auto n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    return std::string(buf, n) + "." + std::to_string(1000 + ms % 1000).substr(1) + "Z";
}

}  // namespace

std::vector<std::unique_ptr<access_log>> access_log::open(const std::string& path, std::size_t workers) {
    std::vector<std::unique_ptr<access_log>> out;
    if (path == "off") return out;
    spdlog::sink_ptr sink;
    if (path == "-")
        sink = std::make_shared<spdlog::sinks::stdout_sink_mt>();
    else
        sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path);
    sink->set_pattern("%v");
    for (std::size_t i = 0; i < workers; ++i) {
        auto pool = std::make_shared<spdlog::details::thread_pool>(8192, 1);
        auto logger = std::make_shared<spdlog::async_logger>("access-" + std::to_string(i), sink, pool,
                                                             spdlog::async_overflow_policy::overrun_oldest);
        logger->set_level(spdlog::level::info);
        logger->flush_on(spdlog::level::info);
        out.push_back(std::unique_ptr<access_log>(new access_log(std::move(pool), std::move(logger))));
    }
    return out;
}

access_log::~access_log() {
    if (logger_) logger_->flush();
    logger_.reset();  // before the pool, whose destructor drains the queue and joins its thread
}

void access_log::write(const access_record& r) {
    using namespace std::chrono;
    boost::json::object o;
    o["time"] = iso_time(system_clock::now());
    o["peer"] = r.peer;
    o["method"] = r.method;
    o["path"] = r.path;
    o["route"] = r.route;
    o["policy"] = r.policy;
    o["decision"] = r.decision;
    o["id_kind"] = r.id_kind;
    o["id"] = r.id;
    o["status"] = r.status;
    o["bytes_in"] = r.bytes_in;
    o["bytes_out"] = r.bytes_out;
    if (r.upstream_us >= 0) o["upstream_us"] = r.upstream_us;
    o["total_us"] = r.total_us;
    line_ = boost::json::serialize(o);
    logger_->info(line_);
}

}  // namespace sluice::server
