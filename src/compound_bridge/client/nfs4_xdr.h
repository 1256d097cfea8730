// The NFSv4.1 XDR of the client: Ganesha's own src/include/nfsv41.h (types and inline
// encoders/decoders over ntirpc's XDR streams), included from the Ganesha source tree
// (meson option ganesha_src). Only the client's .cc files include this; the public
// header nfs_client.h stays free of Ganesha and ntirpc types.
//
// Invariant: every XDR stream the client hands to these functions has x_public == NULL.
// Ganesha's xdr_nfs_argop4 (also on encode) treats a non-null x_public as its
// dispatcher's nfs_request_lookahead record and writes to it; with NULL it uses a local
// one. xdrmem_ncreate() and CountingXdr set it so.
#pragma once
#include <nfsv41.h>

#include <cstdint>
#include <string_view>

namespace txnfs::nfs::xdr {

inline constexpr uint32_t kNfsProgram = 100003;
inline constexpr uint32_t kNfsVersion = 4;
inline constexpr uint32_t kProcCompound = 1;

// An operation of type OPNUM with all-zero arguments.
inline nfs_argop4 op_of(nfs_opnum4 opnum) {
  nfs_argop4 op{};
  op.argop = opnum;
  return op;
}

// A utf8string (component4, linktext4, utf8str_cs) that points at S; S must outlive it.
inline utf8string utf8(std::string_view s) {
  return utf8string{static_cast<u_int>(s.size()), const_cast<char *>(s.data())};
}

}  // namespace txnfs::nfs::xdr
