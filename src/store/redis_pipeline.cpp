#include "store/redis_pipeline.hpp"

#include <algorithm>
#include <new>

namespace sluice::store {

namespace {

std::string format_argv(std::span<const char* const> argv, std::span<const std::size_t> lengths) {
    char* cmd = nullptr;
    int n = redisFormatCommandArgv(&cmd, static_cast<int>(argv.size()), const_cast<const char**>(argv.data()),
                                   lengths.data());
    if (n < 0 || cmd == nullptr) throw std::bad_alloc();
    std::string out(cmd, static_cast<std::size_t>(n));
    redisFreeCommand(cmd);
    return out;
}

template <class Range>
std::string format_range(const Range& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lengths;
    argv.reserve(args.size());
    lengths.reserve(args.size());
    for (const auto& a : args) {
        argv.push_back(a.data());
        lengths.push_back(a.size());
    }
    return format_argv(argv, lengths);
}

}  // namespace

std::string format_command(std::span<const std::string> argv) { return format_range(argv); }

std::string format_command(std::initializer_list<std::string_view> argv) { return format_range(argv); }

bool is_noscript_reply(const redisReply* r) {
    return r != nullptr && r->type == REDIS_REPLY_ERROR && r->str != nullptr &&
           std::string_view(r->str, r->len).starts_with("NOSCRIPT");
}

bool is_readonly_reply(const redisReply* r) {
    return r != nullptr && r->type == REDIS_REPLY_ERROR && r->str != nullptr &&
           std::string_view(r->str, r->len).starts_with("READONLY");
}

// --- reply_reader -------------------------------------------------------------------

reply_reader::reply_reader() : reader_(redisReaderCreate()) {
    if (reader_ == nullptr) throw std::bad_alloc();
}

reply_reader::~reply_reader() { redisReaderFree(reader_); }

bool reply_reader::feed(std::string_view bytes) {
    return redisReaderFeed(reader_, bytes.data(), bytes.size()) == REDIS_OK;
}

reply_reader::status reply_reader::next(reply_ptr& out) {
    void* r = nullptr;
    if (redisReaderGetReply(reader_, &r) != REDIS_OK) return status::error;
    if (r == nullptr) return status::need_more;
    out.reset(static_cast<redisReply*>(r));
    return status::reply;
}

std::string reply_reader::error_text() const { return reader_->errstr; }

void reply_reader::reset() {
    redisReader* fresh = redisReaderCreate();
    if (fresh == nullptr) throw std::bad_alloc();
    redisReaderFree(reader_);
    reader_ = fresh;
}

// --- reconnect_backoff ----------------------------------------------------------------

redis_clock::duration reconnect_backoff::next(double random) {
    random = std::clamp(random, 0.0, 1.0);
    auto d = std::chrono::duration_cast<redis_clock::duration>(next_ * (0.5 + 0.5 * random));
    next_ = std::min(next_ * 2, max_);
    return d;
}

// --- redis_pipeline -------------------------------------------------------------------

redis_pipeline::redis_pipeline(options o, std::vector<std::string> handshake, std::string reload)
    : opts_(o), handshake_(std::move(handshake)), reload_(std::move(reload)) {}

void redis_pipeline::on_connected(time_point now, redis_clock::duration handshake_timeout) {
    queue_.clear();
    in_flight_.clear();
    writing_ = false;
    reload_pending_ = false;
    handshake_left_ = handshake_.size();
    state_ = handshake_left_ == 0 ? state::ready : state::handshaking;
    for (const auto& cmd : handshake_) {
        entry e;
        e.what = kind::handshake;
        e.deadline = now + handshake_timeout;
        e.bytes = cmd;
        queue_.push_back(std::move(e));
    }
}

std::vector<redis_pipeline::id> redis_pipeline::on_disconnect() {
    std::vector<id> failed;
    // In flight first: the order the requests were written in.
    for (const auto* q : {&in_flight_, &queue_})
        for (const auto& e : *q)
            if (e.what == kind::request && !e.tombstone) failed.push_back(e.request);
    queue_.clear();
    in_flight_.clear();
    out_.clear();
    writing_ = false;
    reload_pending_ = false;
    handshake_left_ = 0;
    state_ = state::disconnected;
    return failed;
}

redis_pipeline::push_result redis_pipeline::push(std::string bytes, time_point deadline, bool resend_on_noscript) {
    if (state_ != state::ready) return {0, push_error::not_ready};
    if (outstanding() >= opts_.max_in_flight) return {0, push_error::overloaded};
    entry e;
    e.request = next_id_++;
    e.resend_on_noscript = resend_on_noscript && !reload_.empty();
    e.deadline = deadline;
    e.bytes = std::move(bytes);
    queue_.push_back(std::move(e));
    return {queue_.back().request, push_error::none};
}

redis_pipeline::batch redis_pipeline::take_batch(time_point now) {
    if (writing_ || queue_.empty()) return {};
    out_.clear();
    std::size_t n = 0;
    for (auto& e : queue_) {
        out_ += e.bytes;
        e.written = now;
        // Only a request that may meet NOSCRIPT is ever written again.
        if (!(e.what == kind::request && e.resend_on_noscript)) std::string().swap(e.bytes);
        in_flight_.push_back(std::move(e));
        ++n;
    }
    queue_.clear();
    writing_ = true;
    return {out_, n};
}

void redis_pipeline::write_done() {
    writing_ = false;
    // Do not keep the memory of one exceptional burst for the life of the connection.
    if (out_.capacity() > std::size_t{1} << 20) std::string().swap(out_);
}

redis_pipeline::reply_event redis_pipeline::on_reply(reply_ptr r) {
    reply_event ev;
    if (in_flight_.empty()) {
        ev.what = reply_event::kind::failed;
        ev.error = "a reply that no request waits for";
        return ev;
    }
    entry e = std::move(in_flight_.front());
    in_flight_.pop_front();

    if (e.tombstone) return ev;  // discarded: its caller was already failed
    switch (e.what) {
        case kind::handshake:
            if (r->type == REDIS_REPLY_ERROR) {
                ev.what = reply_event::kind::failed;
                ev.error = std::string(r->str, r->len);
                return ev;
            }
            ev.what = reply_event::kind::handshake;
            if (handshake_left_ > 0 && --handshake_left_ == 0) {
                if (r->type == REDIS_REPLY_STRING) sha_.assign(r->str, r->len);
                state_ = state::ready;
                ev.became_ready = true;
            }
            return ev;
        case kind::reload:
            reload_pending_ = false;
            if (r->type == REDIS_REPLY_STRING) sha_.assign(r->str, r->len);
            return ev;  // discarded; a failed load shows as NOSCRIPT again on the resends
        case kind::request: break;
    }
    if (e.resend_on_noscript && is_noscript_reply(r.get()) && e.resends < opts_.max_resends) {
        ev.what = reply_event::kind::resent;
        ev.request = e.request;
        ev.reload_queued = !reload_pending_;
        queue_reload_and_resend(std::move(e));
        return ev;
    }
    ev.what = reply_event::kind::resolved;
    ev.request = e.request;
    ev.reply = std::move(r);
    return ev;
}

void redis_pipeline::queue_reload_and_resend(entry e) {
    if (!reload_pending_) {
        // Ahead of everything queued: every EVALSHA written after it finds the script.
        entry load;
        load.what = kind::reload;
        load.bytes = reload_;
        queue_.push_front(std::move(load));
        reload_pending_ = true;
    }
    // Behind the reload and the requests resent before it: resends keep their order.
    auto pos = std::find_if(queue_.begin(), queue_.end(),
                            [](const entry& q) { return q.what != kind::reload && q.resends == 0; });
    ++e.resends;
    queue_.insert(pos, std::move(e));
}

bool redis_pipeline::expire(time_point now, std::vector<id>& failed) {
    bool rebuild = false;
    auto due = [&](const entry& e) { return has_deadline(e) && e.deadline <= now; };

    // Not written yet: drop it, it will never be sent.
    auto kept = std::remove_if(queue_.begin(), queue_.end(), [&](const entry& e) {
        if (!due(e)) return false;
        if (e.what == kind::handshake) rebuild = true;
        if (e.what == kind::request) failed.push_back(e.request);
        return true;
    });
    queue_.erase(kept, queue_.end());

    // Written: it may run, and its reply will come; keep its place as a tombstone.
    for (auto& e : in_flight_) {
        if (!due(e)) continue;
        if (e.what == kind::handshake) rebuild = true;
        if (e.what == kind::request) failed.push_back(e.request);
        e.tombstone = true;
        std::string().swap(e.bytes);
    }

    if (!in_flight_.empty() && in_flight_.front().written + opts_.stall_after <= now) rebuild = true;
    return rebuild;
}

std::optional<redis_pipeline::time_point> redis_pipeline::next_deadline() const {
    std::optional<time_point> next;
    auto consider = [&](time_point t) {
        if (!next || t < *next) next = t;
    };
    for (const auto* q : {&queue_, &in_flight_})
        for (const auto& e : *q)
            if (has_deadline(e)) consider(e.deadline);
    if (!in_flight_.empty()) consider(in_flight_.front().written + opts_.stall_after);
    return next;
}

}  // namespace sluice::store
