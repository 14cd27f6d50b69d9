#include "server/access_log.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace sluice::server {

void access_log::lane::add_string(std::string_view key, std::string_view s) {
    line_ += key;
    json_.reset(boost::json::string_view(s.data(), s.size()));
    char buf[256];
    while (!json_.done()) line_ += json_.read(buf, sizeof buf);
}

void access_log::lane::add_number(std::string_view key, std::int64_t n) {
    line_ += key;
    char buf[24];
    line_.append(buf, std::to_chars(buf, buf + sizeof buf, n).ptr);
}

void access_log::lane::begin(std::string_view peer) {
    using namespace std::chrono;
    const auto ms = duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
    if (ms / 1000 != second_) {  // "2026-11-22T17:55:41." once per second
        second_ = ms / 1000;
        const auto secs = static_cast<std::time_t>(second_);
        std::tm tm{};
        gmtime_r(&secs, &tm);
        char buf[32];
        stamp_.assign(buf, std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S.", &tm));
    }
    line_.assign(R"({"time":")");
    line_ += stamp_;
    const char millis[3] = {char('0' + ms % 1000 / 100), char('0' + ms % 100 / 10), char('0' + ms % 10)};
    line_.append(millis, 3);
    line_ += R"(Z")";
    add_string(R"(,"peer":)", peer);
}

void access_log::lane::write(const access_record& r) {
    begin(r.peer);
    if (r.check) {
        line_ += R"(,"check":true)";
        add_string(R"(,"client":)", r.client);
    }
    add_string(R"(,"method":)", r.method);
    add_string(R"(,"path":)", r.path);
    add_string(R"(,"route":)", r.route);
    add_string(R"(,"policy":)", r.policy);
    add_string(R"(,"decision":)", r.decision);
    add_string(R"(,"id_kind":)", r.id_kind);
    add_string(R"(,"id":)", r.id);
    add_number(R"(,"status":)", r.status);
    add_number(R"(,"bytes_in":)", static_cast<std::int64_t>(r.bytes_in));
    add_number(R"(,"bytes_out":)", static_cast<std::int64_t>(r.bytes_out));
    if (!r.upstream_addr.empty()) {
        add_string(R"(,"upstream":)", r.upstream);
        add_string(R"(,"upstream_addr":)", r.upstream_addr);
        add_number(R"(,"attempts":)", r.attempts);
    }
    if (r.upstream_us >= 0) add_number(R"(,"upstream_us":)", r.upstream_us);
    if (r.cost >= 0) add_number(R"(,"cost":)", r.cost);
    add_number(R"(,"total_us":)", r.total_us);
    if (!r.tls_version.empty()) {
        add_string(R"(,"tls_version":)", r.tls_version);
        add_string(R"(,"sni":)", r.sni);
    }
    finish();
}

namespace {

// At most `n` bytes of `s`, not cutting a UTF-8 sequence.
std::string_view cut(std::string_view s, std::size_t n) {
    if (s.size() <= n) return s;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    return s.substr(0, n);
}

}  // namespace

void access_log::lane::write(const rls_record& r) {
    begin(r.peer);
    line_ += R"(,"rls":true)";
    add_string(R"(,"domain":)", cut(r.domain, rls_record::max_key_bytes));
    line_ += R"(,"descriptors":[)";
    const std::size_t shown = std::min(r.descriptors.size(), rls_record::max_descriptors);
    for (std::size_t i = 0; i < shown; ++i) {
        const auto& d = r.descriptors[i];
        line_ += i == 0 ? R"({"keys":[)" : R"(,{"keys":[)";
        const std::size_t keys = std::min(d.keys.size(), rls_record::max_keys);
        for (std::size_t k = 0; k < keys; ++k) add_string(k == 0 ? "" : ",", cut(d.keys[k], rls_record::max_key_bytes));
        line_ += ']';
        if (!d.matched.empty()) add_string(R"(,"matched":)", d.matched);
        if (!d.id.empty()) add_string(R"(,"id":)", d.id);
        if (!d.code.empty()) add_string(R"(,"code":)", d.code);
        line_ += '}';
    }
    line_ += ']';
    add_number(R"(,"descriptor_count":)", static_cast<std::int64_t>(r.descriptor_count));
    if (!r.code.empty()) add_string(R"(,"code":)", r.code);
    add_string(R"(,"grpc_status":)", r.grpc_status);
    add_number(R"(,"total_us":)", r.total_us);
    finish();
}

void access_log::lane::finish() {
    line_ += "}\n";

    bool wake = false;
    {
        std::lock_guard lock(mu_);
        if (pending_.size() + line_.size() > max_pending_bytes) {
            log_.dropped_.fetch_add(1, std::memory_order_relaxed);
            return;
        }
        pending_ += line_;
        if (pending_.size() >= batch_bytes && !signalled_) wake = signalled_ = true;
    }
    if (wake) log_.wake();
}

access_log::access_log(std::string path, std::size_t workers, std::chrono::milliseconds flush_every)
    : path_(std::move(path)), flush_every_(flush_every) {
    open_file();
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "cannot open " + path_);
    try {
        for (std::size_t i = 0; i < workers; ++i) lanes_.push_back(std::unique_ptr<lane>(new lane(*this)));
        writer_ = std::thread([this] { run(); });
    } catch (...) {
        if (fd_ > STDERR_FILENO) ::close(fd_);
        throw;
    }
}

access_log::~access_log() {
    {
        std::lock_guard lock(mu_);
        stopping_ = true;
    }
    cv_.notify_one();
    writer_.join();
    if (fd_ > STDERR_FILENO) ::close(fd_);
}

void access_log::open_file() {
    if (path_ == "-") {
        fd_ = STDOUT_FILENO;
        return;
    }
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
}

void access_log::reopen() {
    reopen_.store(true, std::memory_order_relaxed);
    wake();
}

void access_log::wake() {
    {
        std::lock_guard lock(mu_);
        woken_ = true;
    }
    cv_.notify_one();
}

void access_log::run() {
    std::string batch;
    std::unique_lock lock(mu_);
    for (;;) {
        cv_.wait_for(lock, flush_every_, [this] { return woken_ || stopping_; });
        woken_ = false;
        const bool last = stopping_;
        lock.unlock();
        if (reopen_.exchange(false, std::memory_order_relaxed) && path_ != "-") {
            const int old = fd_;
            open_file();
            if (fd_ < 0) {
                spdlog::error("access log: cannot reopen {}: {}; still writing to the old file", path_,
                              std::strerror(errno));
                fd_ = old;
            } else {
                ::close(old);
                spdlog::info("access log: reopened {}", path_);
            }
        }
        for (auto& l : lanes_) {
            {
                std::lock_guard lane_lock(l->mu_);
                batch.swap(l->pending_);
                l->signalled_ = false;
            }
            write_out(batch);
            batch.clear();
        }
        lock.lock();
        if (last) return;
    }
}

void access_log::write_out(std::string& lines) {
    if (cut_ && !lines.empty()) lines.insert(lines.begin(), '\n');  // end the line a failed write cut
    std::string_view rest = lines;
    while (!rest.empty()) {
        const auto n = ::write(fd_, rest.data(), rest.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const auto lost = std::count(rest.begin(), rest.end(), '\n');
            dropped_.fetch_add(static_cast<std::uint64_t>(lost), std::memory_order_relaxed);
            if (!failing_) spdlog::error("access log: writing to {} failed: {}", path_, std::strerror(errno));
            failing_ = true;
            if (rest.size() != lines.size()) cut_ = rest.data()[-1] != '\n';
            return;
        }
        rest.remove_prefix(static_cast<std::size_t>(n));
    }
    if (failing_ && !lines.empty()) spdlog::info("access log: writing to {} works again", path_);
    failing_ = cut_ = false;
}

}  // namespace sluice::server
