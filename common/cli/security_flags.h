#ifndef PS_COMMON_CLI_SECURITY_FLAGS_H_
#define PS_COMMON_CLI_SECURITY_FLAGS_H_

// The TLS and token flags shared by ps_server, ps_worker and ps_ctl (same names, same meaning on
// both sides; see SecurityOptions). Only main() files call this.

#include "common/transport/grpc_security.h"

namespace ps {

SecurityOptions SecurityOptionsFromFlags();

}  // namespace ps

#endif  // PS_COMMON_CLI_SECURITY_FLAGS_H_
