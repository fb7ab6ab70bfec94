// "Did you mean ...?" for unknown keys and names.
#pragma once

#include <string>
#include <vector>

namespace topotrain {

// The candidate closest to `word` by edit distance, or "" when none is close enough to
// be a plausible typo (distance above a third of the word's length, at least 2).
std::string nearest(const std::string& word, const std::vector<std::string>& candidates);

// " (did you mean 'x'?)" or "" — ready to append to an error message.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace topotrain
