// UTF-8 checks for text that crosses into Python: names, string attributes,
// metadata and error messages. Python decodes them strictly, so a stray byte
// would surface as UnicodeDecodeError instead of the engine's own error.
#pragma once

#include <string>
#include <string_view>

namespace kaiwu {

/// True when `s` is well-formed UTF-8 (no overlong forms, surrogates or code
/// points past U+10FFFF).
bool IsValidUtf8(std::string_view s);

/// `s` with every byte that is not part of well-formed UTF-8 written as \xNN,
/// so it can be shown in a message; valid text is returned unchanged.
std::string EscapeInvalidUtf8(std::string_view s);

}  // namespace kaiwu
