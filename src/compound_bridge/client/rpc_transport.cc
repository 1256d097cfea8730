#include "compound_bridge/client/rpc_transport.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "compound_bridge/client/counting_xdr.h"
#include "compound_bridge/client/nfs_client.h"

namespace txnfs::nfs {
namespace {

constexpr uint32_t kLastFragment = 0x80000000u;
constexpr size_t kMaxReply = size_t{256} << 20;  // a bound against a runaway length

std::string host_port(const std::string &host, uint16_t port) {
  bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

int connect_to(const std::string &host, uint16_t port, const std::string &peer) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo *res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) throw Error("cannot resolve " + host + ": " + gai_strerror(rc));
  int err = 0;
  int fd = -1;
  for (addrinfo *ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      ::close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) throw Error("cannot connect to " + peer + ": " + std::strerror(err));
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// AUTH_SYS as the calling process: effective uid and gid, up to 16 supplementary groups.
AUTH *auth_sys() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  gid_t groups[NGRPS];
  int n = getgroups(NGRPS, groups);
  if (n < 0) n = 0;  // more than NGRPS: send none rather than a truncated list
  uid_t gids[NGRPS];
  for (int i = 0; i < n; i++) gids[i] = groups[i];
  AUTH *auth = authunix_ncreate(host, geteuid(), getegid(), n, gids);
  if (auth == nullptr || AUTH_FAILURE(auth)) throw Error("cannot make AUTH_SYS credentials");
  return auth;
}

std::string describe(const rpc_err &err) {
  std::string s = clnt_sperrno(err.re_status);
  switch (err.re_status) {
    case RPC_PROGVERSMISMATCH:
      s += " (server supports versions " + std::to_string(err.re_vers.low) + " to " +
           std::to_string(err.re_vers.high) + ")";
      break;
    case RPC_AUTHERROR:
      s += " (auth_stat " + std::to_string(static_cast<int>(err.re_why)) + ")";
      break;
    default:
      break;
  }
  return s;
}

struct DecodeCall {
  const std::function<bool(XDR *)> *decode;
  bool called = false;
  bool ok = false;
};

bool decode_results(XDR *xdrs, void *where) {
  auto *call = static_cast<DecodeCall *>(where);
  call->called = true;
  call->ok = (*call->decode)(xdrs);
  return call->ok;
}

}  // namespace

RpcTransport::RpcTransport(const std::string &host, uint16_t port, int timeout_ms)
    : peer_(host_port(host, port)),
      timeout_ms_(timeout_ms),
      next_xid_(static_cast<uint32_t>(std::random_device{}())) {
  auth_ = auth_sys();
  CountingXdr counter;
  if (!put_header(counter.xdrs(), 0, 0)) {
    AUTH_DESTROY(auth_);
    throw Error("cannot encode the RPC call header");
  }
  header_bytes_ = counter.bytes();
  try {
    fd_ = connect_to(host, port, peer_);
  } catch (...) {
    AUTH_DESTROY(auth_);
    throw;
  }
}

RpcTransport::~RpcTransport() {
  if (fd_ >= 0) ::close(fd_);
  AUTH_DESTROY(auth_);
}

bool RpcTransport::put_header(XDR *xdrs, uint32_t xid, uint32_t proc) {
  return XDR_PUTUINT32(xdrs, xid) && XDR_PUTUINT32(xdrs, CALL) &&
         XDR_PUTUINT32(xdrs, RPC_MSG_VERSION) && XDR_PUTUINT32(xdrs, xdr::kNfsProgram) &&
         XDR_PUTUINT32(xdrs, xdr::kNfsVersion) && XDR_PUTUINT32(xdrs, proc) &&
         AUTH_MARSHALL(auth_, xdrs);
}

void RpcTransport::fail(const std::string &what) {
  broken_ = true;
  throw Error(what);
}

void RpcTransport::send_all(const char *p, size_t n) {
  while (n > 0) {
    ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail("cannot send to " + peer_ + ": " + std::strerror(errno));
    p += k;
    n -= static_cast<size_t>(k);
  }
}

void RpcTransport::recv_all(char *p, size_t n) {
  while (n > 0) {
    pollfd pfd{fd_, POLLIN, 0};
    int rc = ::poll(&pfd, 1, timeout_ms_);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) fail("cannot wait for " + peer_ + ": " + std::strerror(errno));
    if (rc == 0) {
      fail("no reply from " + peer_ + " within " + std::to_string(timeout_ms_ / 1000) + " s");
    }
    ssize_t k = ::recv(fd_, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) fail("cannot receive from " + peer_ + ": " + std::strerror(errno));
    if (k == 0) fail(peer_ + " closed the connection");
    p += k;
    n -= static_cast<size_t>(k);
  }
}

// Reads one record (all its fragments) into reply_.
void RpcTransport::read_reply() {
  reply_.clear();
  for (;;) {
    uint32_t mark;
    recv_all(reinterpret_cast<char *>(&mark), sizeof mark);
    mark = ntohl(mark);
    size_t len = mark & ~kLastFragment;
    if (reply_.size() + len > kMaxReply) fail("reply from " + peer_ + " is too large");
    size_t at = reply_.size();
    reply_.resize(at + len);
    recv_all(reply_.data() + at, len);
    if (mark & kLastFragment) return;
  }
}

void RpcTransport::call(uint32_t proc, size_t args_bytes, const std::function<bool(XDR *)> &encode,
                        const std::function<bool(XDR *)> &decode) {
  if (broken_) throw Error("the connection to " + peer_ + " failed earlier");
  size_t message = header_bytes_ + args_bytes;
  if (message > ~kLastFragment) throw Error("the call is too large for one RPC record");
  uint32_t xid = next_xid_++;

  // [record mark][header][arguments]: one buffer, one send.
  request_.resize(4 + message);
  XDR enc;
  xdrmem_ncreate(&enc, request_.data() + 4, static_cast<u_int>(message), XDR_ENCODE);
  if (!put_header(&enc, xid, proc) || !encode(&enc) || XDR_GETPOS(&enc) != message) {
    throw Error("internal error: the call's arguments do not encode to the " +
                std::to_string(args_bytes) + " bytes computed for them");
  }
  uint32_t mark = htonl(kLastFragment | static_cast<uint32_t>(message));
  std::memcpy(request_.data(), &mark, sizeof mark);
  send_all(request_.data(), request_.size());
  last_request_bytes_ = message;

  read_reply();
  last_reply_bytes_ = reply_.size();
  XDR dec;
  xdrmem_ncreate(&dec, reply_.data(), static_cast<u_int>(reply_.size()), XDR_DECODE);
  rpc_msg reply{};
  rpc_msg_init(&reply);
  DecodeCall results{&decode};
  reply.RPCM_ack.ar_results.where = &results;
  reply.RPCM_ack.ar_results.proc = decode_results;
  bool decoded = xdr_nreplymsg(&dec, &reply);
  if (results.called && !results.ok) fail("cannot decode the results from " + peer_);
  if (!decoded) fail("malformed RPC reply from " + peer_);
  if (reply.rm_xid != xid) fail("reply from " + peer_ + " to another call (xid mismatch)");
  rpc_err err{};
  _seterr_reply(&reply, &err);
  if (err.re_status != RPC_SUCCESS) {
    throw CallRefused(peer_ + " refused the call: " + describe(err),
                      err.re_status == RPC_CANTDECODEARGS);
  }
}

}  // namespace txnfs::nfs
