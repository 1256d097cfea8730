// CountingXdr: an XDR encode stream that stores nothing and counts the bytes an encoder
// puts, so a request's exact size is known without building it (WRITE data is counted,
// not copied).
#pragma once
#include <cstddef>

#include "compound_bridge/client/nfs4_xdr.h"

namespace txnfs::nfs {

class CountingXdr {
 public:
  CountingXdr();
  CountingXdr(const CountingXdr &) = delete;  // the stream points back at this object
  CountingXdr &operator=(const CountingXdr &) = delete;

  XDR *xdrs() { return &xdr_; }
  size_t bytes() const { return bytes_; }

 private:
  static bool put_unit(XDR *xdrs, uint32_t);
  static bool put_bytes(XDR *xdrs, const char *, u_int len);
  static u_int get_pos(XDR *xdrs);

  XDR xdr_{};
  size_t bytes_ = 0;
  // ntirpc's inline fast path writes through x_data while x_data + 4 <= vio_wrap; both
  // point at this word, so every put goes through the counting x_ops instead.
  alignas(8) char no_room_[8] = {};
};

}  // namespace txnfs::nfs
