// Names of NFS operations for messages ("LOOKUP", "OPEN", ...). The public names
// (status_name, type_name, op_name) are declared in nfs_client.h.
#pragma once
#include <string>

#include "compound_bridge/client/nfs4_xdr.h"

namespace txnfs::nfs {

std::string nfs_op_name(nfs_opnum4 op);
// The operation with the name it acts on: "LOOKUP b", "OPEN f", "WRITE".
std::string describe_op(const nfs_argop4 &op);

}  // namespace txnfs::nfs
