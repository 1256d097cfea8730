// RpcTransport: ONC RPC calls to the NFS program over one TCP connection, with AUTH_SYS
// credentials of the calling process.
//
// ntirpc supplies the XDR streams, the AUTH_SYS credential (authunix_ncreate) and the
// reply-header decoder; the record marking on the socket is done here. (ntirpc 4.3's own
// client, clnt_vc, runs on its server machinery -- svc_init, event channels, ioq writer
// threads; in a standalone program the reply to a NULL call never arrived.)
//
// A call is one record: the header, then the arguments, encoded straight into one
// buffer that is written with one send; the reply is read into one buffer and decoded
// in place. One call at a time; no retransmission (TCP).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "compound_bridge/client/nfs4_xdr.h"

namespace txnfs::nfs {

class RpcTransport {
 public:
  // Connects to HOST:PORT; throws Error (with host:port) when it cannot.
  RpcTransport(const std::string &host, uint16_t port, int timeout_ms);
  ~RpcTransport();
  RpcTransport(const RpcTransport &) = delete;
  RpcTransport &operator=(const RpcTransport &) = delete;

  // Bytes of the call header: xid, program, version, procedure, AUTH_SYS credential and
  // verifier. The same for every call of this transport.
  size_t header_bytes() const { return header_bytes_; }

  // Calls PROC of the NFS program. ENCODE must put exactly ARGS_BYTES bytes of arguments;
  // DECODE reads the results of an accepted reply. Throws CallRefused when the server
  // refuses the call (the transport stays usable), and Error when the connection fails,
  // no reply comes within the timeout, or a decoder fails; the transport is then broken
  // (every later call throws).
  void call(uint32_t proc, size_t args_bytes, const std::function<bool(XDR *)> &encode,
            const std::function<bool(XDR *)> &decode);

  size_t last_request_bytes() const { return last_request_bytes_; }
  size_t last_reply_bytes() const { return last_reply_bytes_; }
  const std::string &peer() const { return peer_; }

 private:
  bool put_header(XDR *xdrs, uint32_t xid, uint32_t proc);
  void send_all(const char *p, size_t n);
  void recv_all(char *p, size_t n);
  void read_reply();
  [[noreturn]] void fail(const std::string &what);

  std::string peer_;  // "host:port", for messages
  int fd_ = -1;
  int timeout_ms_;
  AUTH *auth_ = nullptr;
  uint32_t next_xid_;
  size_t header_bytes_ = 0;
  bool broken_ = false;
  std::vector<char> request_;  // record mark + call; capacity reused
  std::vector<char> reply_;    // the reply's record, fragments joined; capacity reused
  size_t last_request_bytes_ = 0;
  size_t last_reply_bytes_ = 0;
};

}  // namespace txnfs::nfs
