// The identity module's public headers, for convenience.
#pragma once

#include "identity/address.hpp"
#include "identity/hasher.hpp"
#include "identity/jwt.hpp"
#include "identity/user.hpp"
