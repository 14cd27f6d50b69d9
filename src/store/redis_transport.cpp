#include "store/redis_transport.hpp"

#include "store/redis_cluster.hpp"
#include "store/redis_connection.hpp"

namespace sluice::store {

const char* to_string(redis_error e) {
    switch (e) {
        case redis_error::none: return "ok";
        case redis_error::not_ready: return "redis not connected";
        case redis_error::overloaded: return "too many redis calls in flight";
        case redis_error::timeout: return "redis timeout";
        case redis_error::connection_lost: return "redis connection lost";
        case redis_error::stopped: return "redis connection stopped";
    }
    return "redis error";
}

std::shared_ptr<redis_transport> make_transport(boost::asio::any_io_executor ex, const config::store_config& c,
                                                redis_connection_options o, std::shared_ptr<redis_counters> counters) {
    if (c.type == config::store_config::kind::redis_cluster)
        return redis_cluster::create(std::move(ex), std::move(o), c.redis_nodes, std::move(counters));
    return redis_connection::create(std::move(ex), std::move(o), std::move(counters));
}

}  // namespace sluice::store
