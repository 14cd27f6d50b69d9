#include "store/redis_store.hpp"

#include "store/cluster_slots.hpp"

#include <spdlog/spdlog.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <openssl/evp.h>

#include <algorithm>
#include <exception>

namespace sluice::store {

namespace asio = boost::asio;

namespace {

// Redis names a script by the SHA1 of its text, in lowercase hex.
std::string script_sha1(const std::string& script) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_Digest(script.data(), script.size(), md, &len, EVP_sha1(), nullptr) != 1)
        throw std::runtime_error("SHA1 unavailable");
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    for (unsigned i = 0; i < len; ++i) {
        out += digits[md[i] >> 4];
        out += digits[md[i] & 0xf];
    }
    return out;
}

// A lease change, on its own: the connection (or cluster) is held until the reply.
asio::awaitable<void> send_lease(std::shared_ptr<redis_connection> conn, std::shared_ptr<redis_cluster> cluster,
                                 std::uint16_t slot, std::vector<std::string> argv, redis_clock::time_point deadline,
                                 std::shared_ptr<redis_counters> counters) {
    redis_connection::result reply;
    // (Not a conditional expression: GCC 12 destroys a co_await's result twice there.)
    if (conn) {
        reply = co_await conn->call(std::move(argv), true);
    } else {
        reply = co_await cluster->call(slot, std::move(argv), true, deadline);
    }
    if (!reply.ok() || reply.reply->type != REDIS_REPLY_INTEGER) counters->errors.add();
}

}  // namespace

redis_store::redis_store(const config::store_config& c, const redis_store_options& o)
    : conn_opts_(redis_connection_options::from(c, o.script.empty() ? std::string(rate_limit_lua) : o.script, o.tls)),
      key_prefix_(c.redis_key_prefix),
      counters_(std::make_shared<redis_counters>()),
      cache_(o.deny_cache_max) {
    conn_opts_.max_in_flight = o.max_in_flight;
    if (c.type == config::store_config::kind::redis_cluster) {
        seeds_ = c.redis_nodes;
        cluster_sha_ = script_sha1(conn_opts_.script);
    }
}

redis_store::~redis_store() = default;

void redis_store::start(boost::asio::any_io_executor ex) {
    if (conn_ || cluster_) return;
    ex_ = ex;
    if (!seeds_.empty()) {
        cluster_ = redis_cluster::create(std::move(ex), conn_opts_, seeds_, counters_);
        started_.store(true, std::memory_order_release);
        cluster_->start();
        return;
    }
    conn_ = redis_connection::create(std::move(ex), conn_opts_, counters_);
    started_.store(true, std::memory_order_release);
    conn_->start();
}

void redis_store::stop() {
    if (conn_) conn_->stop();
    if (cluster_) cluster_->stop();
}

bool redis_store::ready() const {
    if (!started_.load(std::memory_order_acquire)) return false;
    return cluster_ ? cluster_->ready() : conn_->ready();
}

// Whether a check can be tried: with a cluster, one lost node fails only its own slots.
bool redis_store::can_call() const { return cluster_ ? cluster_->usable() : ready(); }

void redis_store::on_reload() {
    ++generation_;
    cache_.clear();
    counters_->deny_cache_size.set(0);
}

limit::check_result redis_store::failed(const char* why) {
    counters_->errors.add();
    return redis_script::failure(why);
}

std::optional<limit::check_result> redis_store::try_check(const limit::check_request& r) {
    try {
        // A count_rejected denial must reach the store: it is counted there.
        if (auto denied = r.count_rejected ? std::nullopt : cache_.find(r, redis_clock::now())) {
            counters_->deny_cache_hits.add();
            counters_->deny_cache_size.set(cache_.size());
            limit::check_result out;
            out.verdict = std::move(*denied);
            return out;
        }
        counters_->deny_cache_size.set(cache_.size());
        if (!can_call()) return failed("redis not connected");
        return std::nullopt;
    } catch (const std::exception&) {
        return failed("out of memory");
    }
}

boost::asio::awaitable<limit::check_result> redis_store::check(limit::check_request r) {
    if (!conn_ && !cluster_) co_return failed("redis store not started");
    try {
        const auto asked = redis_clock::now();
        const auto generation = generation_;
        limit::check_result out;
        if (cluster_) {
            out = co_await decide_on_cluster(r, asked + conn_opts_.timeout);
        } else {
            out = co_await decide_batched(r, 0, asked + conn_opts_.timeout);
        }
        if (out.state == limit::check_result::status::error) {
            counters_->errors.add();
            co_return out;
        }
        // A concurrency refusal holds only until some request ends: it is not cached.
        if (!out.verdict.allowed && !r.count_rejected && !out.verdict.retry_unknown() && generation == generation_) {
            cache_.insert(r, out.verdict, asked);
            counters_->deny_cache_size.set(cache_.size());
        }
        co_return out;
    } catch (const std::exception& e) {
        spdlog::warn("redis store: {}", e.what());
    }
    co_return failed("redis store failure");
}

boost::asio::awaitable<limit::check_result> redis_store::decide_batched(const limit::check_request& r,
                                                                        std::uint16_t slot,
                                                                        redis_clock::time_point deadline) {
    using error = redis_connection::error;
    limit::check_result out;
    if (batched_ >= conn_opts_.max_in_flight)
        co_return redis_script::failure(redis_connection::to_string(error::overloaded));
    // Counted out by the batch's leader once it has the reply. (A frame destroyed with its
    // io_context, the store perhaps gone before, touches nothing: no guard object here.)
    ++batched_;
    const auto open = std::find_if(open_batches_.begin(), open_batches_.end(),
                                   [slot](const open_batch& o) { return o.slot == slot; });
    if (open != open_batches_.end() && open->b->members.size() + 1 < max_batch) {
        auto* b = open->b;
        try {
            co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
                [b, &r, &out](auto handler) {
                    b->members.push_back({&r, &out, std::move(handler)});
                },
                asio::use_awaitable);
        } catch (...) {
            --batched_;  // it never joined (only the initiation throws)
            throw;
        }
        co_return out;
    }

    batch mine;
    if (open != open_batches_.end()) {
        open->b = &mine;  // the full one is closed
    } else {
        try {
            open_batches_.push_back({slot, &mine});
        } catch (...) {
            --batched_;
            throw;
        }
    }
    std::exception_ptr yield_error;
    try {
        co_await asio::post(ex_, asio::use_awaitable);
    } catch (...) {
        yield_error = std::current_exception();
    }
    const auto mine_at =
        std::find_if(open_batches_.begin(), open_batches_.end(), [&mine](const open_batch& o) { return o.b == &mine; });
    if (mine_at != open_batches_.end()) {
        *mine_at = open_batches_.back();
        open_batches_.pop_back();
    }
    const std::size_t n = 1 + mine.members.size();
    std::vector<limit::check_result> results;  // the members', after the leader's
    if (!yield_error) {
        counters_->checks.add(n);
        try {
            out = redis_script::failure("redis store failure");  // unless replaced below
            const std::string& sha = conn_ ? conn_->script_sha() : cluster_sha_;
            std::string command;
            std::vector<const limit::check_request*> requests;
            if (n == 1) {
                command = redis_script::format_call(sha, key_prefix_, r);
            } else {
                requests.reserve(n);
                requests.push_back(&r);
                for (const auto& m : mine.members) requests.push_back(m.request);
                command = redis_script::format_batch(sha, key_prefix_, requests);
            }
            redis_connection::result reply;
            // (Not a conditional expression: GCC 12 destroys a co_await's result twice there.)
            if (conn_) {
                reply = co_await conn_->call_formatted(std::move(command), true, false, deadline);
            } else {
                reply = co_await cluster_->call_formatted(slot, std::move(command), true, deadline);
            }
            if (!reply.ok()) {
                out = redis_script::failure(redis_connection::to_string(reply.failure));
                results.assign(n, out);
            } else if (n == 1) {
                out = redis_script::parse_reply(reply.reply.get(), r);
            } else {
                redis_script::parse_batch_reply(reply.reply.get(), requests, results);
                out = std::move(results[0]);
            }
        } catch (const std::exception& e) {
            spdlog::warn("redis store: {}", e.what());
        }
    }
    batched_ -= n;
    // Every member is woken, whatever happened (each from the event loop, not from here).
    for (std::size_t i = 0; i < mine.members.size(); ++i) {
        auto& m = mine.members[i];
        try {
            *m.out = i + 1 < results.size() ? std::move(results[i + 1]) : redis_script::failure("redis store failure");
        } catch (const std::exception&) {
            m.out->state = limit::check_result::status::error;  // (no message: out of memory)
        }
        asio::post(ex_, [wake = std::move(m.wake)]() mutable { std::move(wake)(); });
    }
    if (yield_error) std::rethrow_exception(yield_error);
    co_return out;
}

void redis_store::change_lease(const limit::check_request& r, limit::lease_change c) {
    if (r.lease == 0 || !can_call()) return;
    if (conn_) {
        std::vector<std::string> argv;
        if (!redis_script::build_lease(argv, conn_->script_sha(), key_prefix_, r, c)) return;
        asio::co_spawn(ex_, send_lease(conn_, nullptr, 0, std::move(argv), {}, counters_), asio::detached);
        return;
    }
    // One call per identifier: each is its own slot.
    const auto deadline = redis_clock::now() + conn_opts_.timeout;
    for (std::size_t i = 0; i < r.keys.size(); ++i) {
        std::vector<std::string> argv;
        const limit::check_request one{r.keys.subspan(i, 1), r.cost, r.count_rejected, r.lease};
        if (!redis_script::build_lease(argv, cluster_sha_, key_prefix_, one, c)) continue;
        const auto slot = cluster::key_slot(argv[3]);
        asio::co_spawn(ex_, send_lease(nullptr, cluster_, slot, std::move(argv), deadline, counters_), asio::detached);
    }
}

boost::asio::awaitable<limit::check_result> redis_store::decide_part(limit::check_request r, std::size_t key,
                                                                     redis_script::call_flag flag,
                                                                     redis_script::undo_record* undo,
                                                                     redis_clock::time_point deadline) {
    const limit::check_request one{r.keys.subspan(key, 1), r.cost, r.count_rejected, r.lease};
    std::vector<std::string> argv;
    redis_script::build_call(argv, cluster_sha_, key_prefix_, one, std::nullopt, flag);
    const auto slot = cluster::key_slot(argv[3]);  // the identifier's HASH: its hash tag
    auto reply = co_await cluster_->call(slot, std::move(argv), true, deadline);
    if (!reply.ok()) co_return redis_script::failure(redis_connection::to_string(reply.failure));
    auto out = redis_script::parse_reply(reply.reply.get(), one, undo);
    for (auto& t : out.verdict.tiers) t.key_index = key;
    co_return out;
}

boost::asio::awaitable<void> redis_store::undo_part(limit::check_request r, std::size_t key,
                                                    const redis_script::undo_record* u,
                                                    redis_clock::time_point deadline) {
    std::vector<std::string> argv;
    redis_script::build_undo(argv, cluster_sha_, key_prefix_, r.keys[key], r.cost, *u);
    const auto slot = cluster::key_slot(argv[3]);
    auto reply = co_await cluster_->call(slot, std::move(argv), true, deadline);
    if (reply.ok() && reply.reply->type == REDIS_REPLY_INTEGER) {
        counters_->undos.add();
    } else {
        spdlog::warn("redis cluster: a commit could not be taken back ({}); its identifier stays charged",
                     reply.ok() ? "error reply" : redis_connection::to_string(reply.failure));
    }
}

boost::asio::awaitable<limit::check_result> redis_store::decide_on_cluster(const limit::check_request& r,
                                                                           redis_clock::time_point deadline) {
    namespace ex = asio::experimental;
    const std::size_t n = r.keys.size();
    using redis_script::call_flag;
    // One identifier: batched with the turn's other checks of its slot.
    if (n == 1)
        co_return co_await decide_batched(r, cluster::key_slot(redis_script::key_name(key_prefix_, r.keys[0])),
                                          deadline);

    // Every identifier at once, each on its own node (or pipelined on a shared one). A
    // count_rejected request is committed everywhere whatever the verdict: nothing to undo.
    const bool counted = r.count_rejected;
    std::vector<redis_script::undo_record> undo(n);
    using part_op =
        decltype(asio::co_spawn(ex_, decide_part(r, 0, call_flag::none, nullptr, deadline), asio::deferred));
    std::vector<part_op> ops;
    ops.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
        ops.push_back(asio::co_spawn(
            ex_, decide_part(r, i, counted ? call_flag::none : call_flag::undo, counted ? nullptr : &undo[i], deadline),
            asio::deferred));
    }
    auto [order, errors, parts] =
        co_await ex::make_parallel_group(std::move(ops)).async_wait(ex::wait_for_all(), asio::use_awaitable);
    (void)order;
    for (const auto& e : errors)
        if (e) std::rethrow_exception(e);

    // A denial anywhere is the answer; else a failure anywhere; else the admission.
    const auto ok = [](const limit::check_result& p) { return p.state == limit::check_result::status::ok; };
    bool denied = false;
    for (const auto& p : parts) denied = denied || (ok(p) && !p.verdict.allowed);
    if (denied && counted) {
        // As decide() does after counting a refusal: the identifiers that admitted are
        // checked again on what they now hold (the refusing ones' replies already are),
        // once the slots they took for a request that is not admitted are given back.
        // (A part that failed may have taken one too. With a deadline of their own: the
        // check's may be spent.)
        if (r.lease != 0) {
            const auto release_by = redis_clock::now() + conn_opts_.timeout;
            for (std::size_t i = 0; i < n; ++i) {
                std::vector<std::string> argv;
                const limit::check_request one{r.keys.subspan(i, 1), r.cost, false, r.lease};
                if ((ok(parts[i]) && !parts[i].verdict.allowed) ||
                    !redis_script::build_lease(argv, cluster_sha_, key_prefix_, one, limit::lease_change::release))
                    continue;
                auto reply = co_await cluster_->call(cluster::key_slot(argv[3]), std::move(argv), true, release_by);
                if (!reply.ok() || reply.reply->type != REDIS_REPLY_INTEGER) counters_->errors.add();
            }
        }
        for (std::size_t i = 0; i < n; ++i) {
            if (ok(parts[i]) && parts[i].verdict.allowed)
                parts[i] = co_await decide_part(r, i, call_flag::query, nullptr, deadline);
        }
    }
    limit::check_result out;
    for (auto& p : parts) {
        if (!ok(p)) {
            if (!denied) co_return std::move(p);
            continue;
        }
        out.verdict.allowed = out.verdict.allowed && p.verdict.allowed;
        out.verdict.retry_after = std::max(out.verdict.retry_after, p.verdict.retry_after);
        for (auto& t : p.verdict.tiers) out.verdict.tiers.push_back(t);
    }
    if (!denied || counted) co_return out;

    // Take back what the others committed, all at once, within the same deadline.
    using undo_op = decltype(asio::co_spawn(ex_, undo_part(r, 0, &undo[0], deadline), asio::deferred));
    std::vector<undo_op> undos;
    for (std::size_t i = 0; i < n; ++i)
        if (ok(parts[i]) && parts[i].verdict.allowed)
            undos.push_back(asio::co_spawn(ex_, undo_part(r, i, &undo[i], deadline), asio::deferred));
    if (!undos.empty()) {
        auto [undo_order, undo_errors] =
            co_await ex::make_parallel_group(std::move(undos)).async_wait(ex::wait_for_all(), asio::use_awaitable);
        (void)undo_order;
        for (const auto& e : undo_errors)
            if (e) std::rethrow_exception(e);
    }
    // An undo leaves a field that changed since as it is: the slot taken there goes too.
    if (r.lease != 0) change_lease(r, limit::lease_change::release);
    co_return out;
}

}  // namespace sluice::store
