#include "compound_bridge/client/client_impl.h"

namespace txnfs::nfs {

Client::Client(const ClientOptions &options) : impl_(std::make_unique<Impl>(options)) {}

Client::~Client() = default;  // Session's destructor closes

void Client::close() { impl_->session.close(); }

const ClientOptions &Client::options() const { return impl_->session.options(); }

const SessionLimits &Client::limits() const { return impl_->session.limits(); }

}  // namespace txnfs::nfs
