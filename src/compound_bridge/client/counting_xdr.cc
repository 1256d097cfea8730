#include "compound_bridge/client/counting_xdr.h"

namespace txnfs::nfs {
namespace {

bool fail_unit(XDR *, uint32_t *) { return false; }
bool fail_bytes(XDR *, char *, u_int) { return false; }
bool fail_setpos(XDR *, u_int) { return false; }
void no_destroy(XDR *) {}
bool fail_control(XDR *, int, void *) { return false; }
bool fail_bufs(XDR *, xdr_uio *, u_int) { return false; }
bool fail_newbuf(XDR *) { return false; }
int fail_iovcount(XDR *, u_int, u_int) { return -1; }
bool fail_fillbufs(XDR *, u_int, xdr_vio *, u_int) { return false; }
bool fail_allochdrs(XDR *, u_int, xdr_vio *, int) { return false; }

}  // namespace

bool CountingXdr::put_unit(XDR *xdrs, uint32_t) {
  static_cast<CountingXdr *>(xdrs->x_private)->bytes_ += 4;
  return true;
}

bool CountingXdr::put_bytes(XDR *xdrs, const char *, u_int len) {
  static_cast<CountingXdr *>(xdrs->x_private)->bytes_ += len;
  return true;
}

u_int CountingXdr::get_pos(XDR *xdrs) {
  return static_cast<u_int>(static_cast<CountingXdr *>(xdrs->x_private)->bytes_);
}

CountingXdr::CountingXdr() {
  static const rpc_xdr::xdr_ops ops = {
      fail_unit,   put_unit,      fail_bytes,    put_bytes,      get_pos,
      fail_setpos, no_destroy,    fail_control,  fail_bufs,      fail_bufs,
      fail_newbuf, fail_iovcount, fail_fillbufs, fail_allochdrs,
  };
  xdr_.x_ops = &ops;
  xdr_.x_op = XDR_ENCODE;
  xdr_.x_public = nullptr;
  xdr_.x_private = this;
  auto *p = reinterpret_cast<uint8_t *>(no_room_);
  xdr_.x_data = p;
  xdr_.x_v.vio_base = xdr_.x_v.vio_head = xdr_.x_v.vio_tail = xdr_.x_v.vio_wrap = p;
  xdr_.x_base = &xdr_.x_v;
}

}  // namespace txnfs::nfs
