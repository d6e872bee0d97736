// The reply side of RESP2: appends one reply of each type to an output
// buffer. Error and simple-string texts are written on one line: a CR or
// LF in them (an rkv message, a client's argument echoed in an error)
// becomes a space, as redis-server does, so a reply can never break the
// framing.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rkv::gateway {

// "+text\r\n"
void AppendSimple(std::string* out, std::string_view text);
// "-text\r\n"; `text` starts with the error's code ("ERR ...", "NOAUTH ...").
void AppendError(std::string* out, std::string_view text);
// ":n\r\n"
void AppendInteger(std::string* out, int64_t n);
// "$len\r\nbytes\r\n"
void AppendBulk(std::string* out, std::string_view bytes);
// "$-1\r\n"
void AppendNull(std::string* out);
// "*n\r\n", the header of an array of n replies that follow.
void AppendArrayHeader(std::string* out, size_t n);
// "+OK\r\n"
inline void AppendOk(std::string* out) { out->append("+OK\r\n"); }

}  // namespace rkv::gateway
