#include "http/message.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>

#include <charconv>

namespace sluice::http {

using bsv = boost::beast::string_view;

void message_head::clear() {
    text_.clear();
    fields_.clear();
    method = bhttp::verb::unknown;
    method_len_ = target_len_ = reason_len_ = 0;
    status = 0;
    version = 11;
}

void message_head::add(bhttp::field f, std::string_view name, std::string_view value) {
    header_field h{f, static_cast<std::uint32_t>(text_.size()), static_cast<std::uint32_t>(name.size()), 0,
                   static_cast<std::uint32_t>(value.size())};
    text_.append(name);
    h.value_off = static_cast<std::uint32_t>(text_.size());
    text_.append(value);
    fields_.push_back(h);
}

void message_head::set_request_line(bhttp::verb v, std::string_view method_text, std::string_view target,
                                    unsigned ver) {
    method = v;
    text_.assign(method_text);
    text_.append(target);
    method_len_ = static_cast<std::uint32_t>(method_text.size());
    target_len_ = static_cast<std::uint32_t>(target.size());
    version = ver;
}

void message_head::set_status_line(unsigned st, std::string_view reason, unsigned ver) {
    status = st;
    text_.assign(reason);
    reason_len_ = static_cast<std::uint32_t>(reason.size());
    version = ver;
}

std::string_view message_head::find(bhttp::field f) const {
    for (const auto& h : fields_)
        if (h.name == f) return value(h);
    return {};
}

std::size_t message_head::count(bhttp::field f) const {
    std::size_t n = 0;
    for (const auto& h : fields_) n += h.name == f;
    return n;
}

void body_sink::data(std::string_view piece) {
    bytes += piece.size();
    if (mode == framing::none || piece.empty()) return;
    if (mode == framing::chunked) {
        char size[20];
        auto r = std::to_chars(size, size + sizeof size, piece.size(), 16);
        out->append(size, r.ptr);
        out->append("\r\n");
        out->append(piece);
        out->append("\r\n");
    } else {
        out->append(piece);
    }
}

void body_sink::finish() {
    if (mode == framing::chunked) out->append("0\r\n\r\n");
}

template <bool R>
void parser<R>::on_request_impl(bhttp::verb v, bsv method, bsv target, int version, error_code&) {
    head_.set_request_line(v, method, target, static_cast<unsigned>(version));
}

template <bool R>
void parser<R>::on_response_impl(int status, bsv reason, int version, error_code& ec) {
    // Beast takes any three digits; 000 would be relayed as an interim response.
    if (status < 100 || status > 599) ec = bhttp::error::bad_status;
    head_.set_status_line(static_cast<unsigned>(status), reason, static_cast<unsigned>(version));
}

template <bool R>
void parser<R>::on_field_impl(bhttp::field f, bsv name, bsv value, error_code&) {
    using boost::beast::iequals;
    // Beast 1.81 accepts codings other than a final `chunked`, and a Content-Length after a
    // non-chunked Transfer-Encoding. Either lets two hops disagree on where a message
    // ends (request smuggling), so both are refused in on_header_impl.
    if (f == bhttp::field::transfer_encoding) {
        if (!iequals(value, "chunked")) framing_error_ = framing_error::transfer_encoding_not_chunked;
        if (seen_length_) framing_error_ = framing_error::both_length_and_chunked;
        seen_te_ = true;
    } else if (f == bhttp::field::content_length) {
        if (seen_te_) framing_error_ = framing_error::both_length_and_chunked;
        seen_length_ = true;
    } else if (f == bhttp::field::expect) {
        has_expect_ = true;
        expect_continue_ = iequals(value, "100-continue");
    }
    head_.add(f, name, value);
}

template <bool R>
void parser<R>::on_header_impl(error_code& ec) {
    // Requests only: an HTTP/1.0 upstream that says chunked is read as it says, as before.
    if constexpr (R) {
        if (seen_te_ && head_.version < 11) framing_error_ = framing_error::transfer_encoding_in_http10;
    }
    if (framing_error_ != framing_error::none) ec = bhttp::error::bad_transfer_encoding;
}

template <bool R>
void parser<R>::on_body_init_impl(const boost::optional<std::uint64_t>& length, error_code& ec) {
    if (length && *length > max_body_) ec = bhttp::error::body_limit;
}

template <bool R>
std::size_t parser<R>::on_body_impl(bsv body, error_code&) {
    sink_.data(body);
    return body.size();
}

template <bool R>
void parser<R>::on_chunk_header_impl(std::uint64_t size, bsv, error_code& ec) {
    // Called once per chunk header, however it arrived: the total is exact.
    if (size > max_body_ - chunked_total_) ec = bhttp::error::body_limit;
    chunked_total_ += size;
}

template <bool R>
std::size_t parser<R>::on_chunk_body_impl(std::uint64_t, bsv body, error_code&) {
    sink_.data(body);
    return body.size();
}

template <bool R>
void parser<R>::on_finish_impl(error_code&) {
    sink_.finish();
}

template class parser<true>;
template class parser<false>;

}  // namespace sluice::http
