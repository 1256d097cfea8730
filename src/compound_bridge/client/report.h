// What txnfs-nfs prints about a COMPOUND: a line per operation and one for the COMPOUND,
// or one JSON object (pure; unit-tested).
//
//   ok write /a/b 4096 bytes
//   NFS4ERR_NOENT remove /x (at REMOVE x)
//   not run mkdir /y
//   compound NFS4ERR_NOENT at REMOVE x: tag=txn ops=3 nfs_ops=9 request_bytes=948 ...
#pragma once
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "compound_bridge/client/nfs_client.h"

namespace txnfs::nfs::cli {

struct RunInfo {
  int retries = 0;        // times the COMPOUND was sent again after NFS4ERR_DELAY
  double elapsed_ms = 0;  // of the last send, reply included
};

// "ok", the error name, or "not run".
std::string op_status(const OpResult &op);
// Why OP, although it succeeded, did not do all it was asked to, or "": a write the
// server cut short; a read of a whole file (WHOLE_FILE: no --count) that stopped at
// --read-max before the end.
std::string incomplete(const OpResult &op, bool whole_file);

// The line of one operation (a readdir's names follow on lines of their own).
std::string op_line(const OpResult &op);
// Each operation's line (and a readdir's names).
void print_ops(std::ostream &out, const CompoundResult &r);
// "compound NFS4_OK: tag=txn ops=3 ..."; WHERE (e.g. "node=n1 host=127.31.7.1") goes
// before tag= when not empty.
std::string compound_line(const CompoundResult &r, const RunInfo &info,
                          const std::string &where = "");
// print_ops, then compound_line.
void print_text(std::ostream &out, const CompoundResult &r, const RunInfo &info);
// Each operation as to_json() lists it.
nlohmann::ordered_json ops_json(const CompoundResult &r);
nlohmann::ordered_json to_json(const CompoundResult &r, const RunInfo &info);

// Why a COMPOUND does not fit, and how much of it would; OPS is its operation count.
std::string fit_message(const Fit &fit, size_t ops);
nlohmann::ordered_json fit_json(const Fit &fit, size_t ops);

// A hint for a COMPOUND the server refused as a whole, or "" when there is none.
std::string refusal_hint(const CompoundResult &r);
// A hint for a call of NFS_OPS operations refused with GARBAGE_ARGS, or "".
std::string garbage_args_hint(size_t nfs_ops);

}  // namespace txnfs::nfs::cli
