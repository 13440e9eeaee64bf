// One exception type for problems the user can fix (bad config, missing file, bad data).
// The CLI prints its message on one line and exits with code 2; anything else is a bug.
#pragma once
#include <stdexcept>
#include <string>

namespace ropelab {

class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ropelab
