#include "e2e.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

namespace sluice::test {

std::uint16_t unused_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("bind failed");
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

redis_server::redis_server(std::uint16_t p) : port(p) {
    proc = std::make_unique<process>(std::vector<std::string>{"redis-server", "--port", std::to_string(port), "--bind",
                                                              "127.0.0.1", "--save", "", "--appendonly", "no",
                                                              "--maxmemory-policy", "noeviction"});
    proc->wait_for_line("Ready to accept connections");
}

void redis_server::stop() {
    proc->signal(SIGTERM);
    proc->wait_exit(std::chrono::seconds(10));
}

}  // namespace sluice::test
