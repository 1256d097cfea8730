// txnfs::nfs — an NFSv4.1 client that packs many file operations into ONE COMPOUND
// (the vNFS idea). A Client holds a TCP connection and a session; a Compound collects
// operations (write, read, mkdir, ...), each of which becomes a short run of NFS
// operations, and execute() sends them all in one COMPOUND behind one SEQUENCE. A
// COMPOUND whose tag starts with "txn" is run as one transaction by txnfs's patched
// NFS-Ganesha; any other tag is an ordinary COMPOUND.
//
//   txnfs::nfs::Client client({.server = "127.0.0.1", .port = 2049});
//   txnfs::nfs::Compound c(client);
//   c.write("/a/x", data_x);                      // OPEN(create); WRITE; CLOSE
//   c.write("/a/y", data_y);
//   if (!c.fit("txn").fits) ...                   // larger than the session allows
//   txnfs::nfs::CompoundResult r = c.execute("txn");
//
// Paths are relative to the export (ClientOptions::export_path); "fh:HEX" names a file by
// the handle GETFH returned, and "fh:HEX/a/b" the entry a/b below that directory.
//
// Failures of NFS operations are results (CompoundResult::status, OpResult::status);
// connection, RPC and protocol failures, and malformed operations, throw nfs::Error.
// A Client is not thread-safe (one session slot); use one Client per thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace txnfs::nfs {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The server refused an RPC call at the RPC level: nothing of it ran.
class CallRefused : public Error {
 public:
  CallRefused(const std::string &what, bool garbage_args)
      : Error(what), garbage_args_(garbage_args) {}
  // It could not decode the arguments (GARBAGE_ARGS).
  bool garbage_args() const { return garbage_args_; }

 private:
  bool garbage_args_;
};

// nfsstat4 values the callers test for (all others by number).
inline constexpr uint32_t kNfs4Ok = 0;
inline constexpr uint32_t kNfs4ErrDelay = 10008;
inline constexpr uint32_t kNfs4ErrResource = 10018;
inline constexpr uint32_t kNfs4ErrMoved = 10019;
inline constexpr uint32_t kNfs4ErrTooManyOps = 10070;

// "NFS4ERR_NOENT" for 2, "NFS4_OK" for 0, "NFS4ERR_<number>" for unknown values.
std::string status_name(uint32_t status);

struct ClientOptions {
  std::string server = "127.0.0.1";
  uint16_t port = 2049;
  std::string export_path = "/";  // the export's path in the server's pseudo file system
  // What CREATE_SESSION asks for; the server may grant less (SessionLimits).
  uint32_t max_request = 1 << 20;
  uint32_t max_response = 1 << 20;
  uint32_t max_operations = 16384;
  int timeout_ms = 120000;  // for each reply
};

// What the session granted (CREATE_SESSION) and what the export allows per READ/WRITE
// (FATTR4_MAXREAD/MAXWRITE of its root).
struct SessionLimits {
  uint32_t max_request = 0;  // bytes of an RPC call, headers included
  uint32_t max_response = 0;
  uint32_t max_operations = 0;  // NFS operations per COMPOUND, SEQUENCE included
  uint64_t max_read = 0;
  uint64_t max_write = 0;
};

// Where a referral's file system lives (one fs_location4 of FATTR4_FS_LOCATIONS).
struct FsLocation {
  std::vector<std::string> servers;  // host names or addresses, as the server sent them
  std::string rootpath;              // its path on those servers ("/b"), pseudo file system
};

struct CompoundResult;

class Client {
 public:
  // Connects, then EXCHANGE_ID, CREATE_SESSION, RECLAIM_COMPLETE, and looks up the export.
  explicit Client(const ClientOptions &options);
  ~Client();  // close(), errors ignored
  Client(const Client &) = delete;
  Client &operator=(const Client &) = delete;

  // DESTROY_SESSION, DESTROY_CLIENTID (releasing any state a failed COMPOUND left open),
  // disconnect. Idempotent.
  void close();

  const ClientOptions &options() const;
  const SessionLimits &limits() const;

  // The fs_locations of the directory DIR (a path as Compound takes them): where it
  // lives when it is a referral (Ganesha answers NFS4ERR_MOVED for it), empty when it is
  // not. One COMPOUND: PUTROOTFH, LOOKUPs, GETATTR(fs_locations). Throws Error when
  // that COMPOUND fails.
  std::vector<FsLocation> fs_locations(std::string_view dir);

  // Sends a COMPOUND of just SEQUENCE and PUTROOTFH with TAG: a message carried by the
  // tag alone, e.g. the bridge's "txn-commit:GID" and "txn-abort:GID".
  CompoundResult tag_only(std::string_view tag);

  struct Impl;

 private:
  friend class Compound;
  std::unique_ptr<Impl> impl_;
};

struct Time {
  int64_t sec = 0;
  uint32_t nsec = 0;
  bool operator==(const Time &) const = default;
};

struct SetTime {
  bool server_time = false;  // SET_TO_SERVER_TIME4 ("now"); otherwise `time`
  Time time;
  bool operator==(const SetTime &) const = default;
};

struct SetAttrs {
  std::optional<uint32_t> mode = {};
  std::optional<uint64_t> size = {};
  std::optional<uint32_t> uid = {};  // sent as the numeric owner string
  std::optional<uint32_t> gid = {};
  std::optional<SetTime> atime = {};
  std::optional<SetTime> mtime = {};
  bool empty() const { return !mode && !size && !uid && !gid && !atime && !mtime; }
  bool operator==(const SetAttrs &) const = default;
};

struct FileAttrs {
  uint32_t type = 0;  // nfs_ftype4: 1 regular, 2 directory, 5 symlink, ...
  uint32_t mode = 0;
  uint64_t size = 0;
  uint32_t nlink = 0;
  std::string owner;  // as the server sends it: "0", or "root@domain" with id mapping
  std::string group;
  Time atime;
  Time mtime;
  uint64_t change = 0;
  uint64_t fileid = 0;
};

// "reg", "dir", "lnk", "blk", "chr", "sock", "fifo", or the number.
std::string type_name(uint32_t type);

enum class OpKind {
  kWrite,
  kRead,
  kMkdir,
  kRemove,
  kRename,
  kLink,
  kSymlink,
  kSetattr,
  kGetattr,
  kReaddir,
  kGetfh
};

// "write", "read", ... (the CLI's operation names).
std::string_view op_name(OpKind kind);

struct WriteOptions {
  uint32_t mode = 0644;  // for a file the OPEN creates
  bool stable = false;   // FILE_SYNC4 instead of UNSTABLE4
};

// The outcome of one operation of a Compound.
struct OpResult {
  enum class State { kOk, kFailed, kNotRun };

  OpKind kind = OpKind::kGetattr;
  std::string path;   // as given
  std::string path2;  // rename/link: the new name; symlink: the path (path is the target)
  State state = State::kNotRun;
  uint32_t status = kNfs4Ok;  // kFailed: the status of the NFS operation that failed
  std::string failed_at;      // kFailed: that NFS operation, e.g. "LOOKUP b" or "OPEN"

  uint64_t bytes = 0;              // write: bytes the server acknowledged; read: bytes returned
  uint64_t requested = 0;          // write: bytes sent; read: most bytes asked for
  bool eof = false;                // read: the end of the file was reached; readdir: of the listing
  std::string data;                // read
  std::optional<FileAttrs> attrs;  // getattr; read (the size at open)
  std::vector<std::string> names;  // readdir
  std::vector<uint8_t> fh;         // getfh
  // write: the write verifier (8 bytes) its last WRITE returned. A WRITE or COMMIT that
  // later returns a different one means the server restarted: what was not durable then
  // (UNSTABLE4 data, lazy COMPOUNDs) may be lost.
  std::string verifier;
};

struct CompoundResult {
  std::string tag;
  uint32_t status = kNfs4Ok;  // the COMPOUND's: that of the NFS operation that failed
  std::string failed_at;      // that NFS operation, e.g. "SEQUENCE" or "LOOKUP b"
  std::vector<OpResult> ops;  // one per operation added, in order
  size_t nfs_ops = 0;         // NFS operations sent, SEQUENCE included
  size_t nfs_results = 0;     // results returned (the failing one is the last)
  size_t request_bytes = 0;   // the RPC call, headers included
  size_t reply_bytes = 0;
  // Whether anything before the failure may have changed the server's file system.
  // False when SEQUENCE itself failed, or only lookups and reads ran before the failure:
  // then sending the COMPOUND again (e.g. after NFS4ERR_DELAY) cannot apply anything twice.
  bool changed_before_failure = false;
  // The COMPOUND stopped inside a Compound::check_referrals() walk (so before every
  // operation added after it): the directory where it stopped, "/a/b" (the prefix of the
  // checked path through the component whose LOOKUP or GETFH failed; "/" for the
  // export's root). With status NFS4ERR_MOVED that directory is a referral
  // (Client::fs_locations says where it lives); with another status it does not exist
  // or is no directory.
  std::string check_dir;
  bool ok() const { return status == kNfs4Ok; }
  // NFS4ERR_DELAY, and sending the same COMPOUND again cannot apply anything twice:
  // nothing before the delay changed files, or the tag asked for a transaction (tags
  // starting with "txn", the bridge's default prefix), which the server rolled back.
  bool delay_retry_safe() const {
    return status == kNfs4ErrDelay && (!changed_before_failure || tag.starts_with("txn"));
  }
};

// One operation as a value, owning its data: what a Journal keeps to build a COMPOUND
// again. Compound::add(op) is the adder of op.kind with these arguments.
struct Operation {
  OpKind kind = OpKind::kGetattr;
  std::string path;
  std::string path2;    // rename/link: the new name; symlink: the path (path: the target)
  std::string data;     // write
  uint32_t mode = 0;    // write, mkdir
  bool stable = false;  // write: FILE_SYNC4
  uint32_t count = 0;   // read, readdir: most bytes
  SetAttrs attrs;       // setattr

  bool operator==(const Operation &) const = default;
};

// Whether a Compound fits the session's limits, and if not, how much of it would.
struct Fit {
  bool fits = false;
  size_t request_bytes = 0;
  size_t max_request = 0;
  size_t nfs_ops = 0;
  size_t max_operations = 0;
  size_t ops_that_fit = 0;  // the longest prefix of the operations that fits
};

class Compound {
 public:
  // CLIENT must outlive the Compound.
  explicit Compound(Client &client);
  ~Compound();
  Compound(Compound &&) noexcept;
  Compound &operator=(Compound &&) noexcept;

  // Each adds one operation. Throw Error for a malformed path (e.g. `remove /`).
  //
  // write: create or truncate, write DATA (in WRITEs of at most max_write bytes), close.
  // DATA is not copied: it must stay valid until the last execute() returns.
  void write(std::string_view path, std::string_view data, const WriteOptions &options = {});
  // read: open, GETATTR, READ of up to MAX_BYTES from offset 0, close.
  void read(std::string_view path, uint32_t max_bytes);
  void mkdir(std::string_view path, uint32_t mode = 0755);
  void remove(std::string_view path);
  void rename(std::string_view from, std::string_view to);
  void link(std::string_view existing, std::string_view new_path);
  void symlink(std::string_view target, std::string_view path);
  void setattr(std::string_view path, const SetAttrs &attrs);
  void getattr(std::string_view path);
  // readdir: the names of one READDIR of up to MAX_BYTES (eof says whether that was all).
  void readdir(std::string_view path, uint32_t max_bytes);
  void getfh(std::string_view path);
  // Any of the above, described by OP. OP.data must stay valid as write()'s DATA.
  void add(const Operation &op);

  // Not an operation: a walk that stops the COMPOUND with NFS4ERR_MOVED when DIR or a
  // directory on its way is a referral (PUTROOTFH, then LOOKUP and GETFH per component:
  // GETFH answers NFS4ERR_MOVED on a referral, LOOKUP does not). Operations added after
  // it then do not run; CompoundResult::check_dir names the directory. Not counted by
  // size(); its NFS operations are counted by nfs_ops(). Nothing for "/".
  void check_referrals(std::string_view dir);

  size_t size() const;     // operations added
  size_t nfs_ops() const;  // NFS operations, SEQUENCE included
  // The exact size of the RPC call execute(TAG) sends, headers included.
  size_t request_bytes(std::string_view tag) const;
  Fit fit(std::string_view tag) const;

  // Sends every operation in one COMPOUND and returns each one's result. It does not
  // check fit(): a COMPOUND over the limits goes out and the server refuses it. May be
  // called again (a new SEQUENCE) to resend the same operations. Throws CallRefused when
  // the server refuses the RPC (e.g. GARBAGE_ARGS: it could not decode that many
  // operations), and Error when no valid reply arrives (the Client is unusable after that).
  CompoundResult execute(std::string_view tag);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace txnfs::nfs
