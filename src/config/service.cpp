// The service section: Sluice as the rate-limit service of another proxy. Each key's reader
// is a function of its own.
#include "config/readers.hpp"

namespace sluice::config::detail {

namespace {

// service.http_listen (an address, or off) is taken at start only.
bool keep_http_listen(config& next, const config& running) {
    const bool changed = next.service.http_listen != running.service.http_listen;
    next.service.http_listen = running.service.http_listen;
    return changed;
}

void read_http_listen(const node_ref& v, service_config& out) {
    if (v.node().IsScalar() && v.node().Scalar() == "off")
        out.http_listen.reset();
    else
        out.http_listen = read_address(v);
}

// Nobody could ask the check with an empty list.
void read_http_peers(const node_ref& v, service_config& out) {
    out.http_peers.clear();
    read_list(v, empty_list::refused, [&](const node_ref& item) { out.http_peers.push_back(read_cidr(item)); });
}

}  // namespace

void read_service(const node_ref& n, service_config& out) {
    read_mapping(n, {
                        {"http_listen", [&](const node_ref& v) { read_http_listen(v, out); }, presence::optional,
                         keep_http_listen},
                        {"http_peers", [&](const node_ref& v) { read_http_peers(v, out); }},
                    });
}

}  // namespace sluice::config::detail
