// Escaping for XML and HTML text and attribute values (& < > " '). Pure; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace bulwark {

std::string XmlEscape(std::string_view s);

}  // namespace bulwark
