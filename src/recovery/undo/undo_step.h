// One step of a transaction's undo log, and its on-disk encoding.
//
// Where steps live: STORE/.txnfs/backups/<txid>/ holds, per step, a record whose text
// is encode(step) -- an xattr of that directory named by the step's sequence number, or
// in older logs a symlink (undo_record.h) -- and for some steps a data object
// "<seq>.d" beside it (a range clone, a stashed object, or an xattr snapshot). Writing
// a record is one journaled XFS metadata operation, and XFS commits its journal in
// order: a step written before a change is durable whenever that change is. This is
// what makes undo information durable before the in-place change without any fsync
// (see docs/crash-model.md).
//
// Every step names the objects it concerns by backing file handle (ino, generation),
// so undoing a step twice, or undoing it when the change it protects never happened,
// does nothing (undo is idempotent and restartable). The one exception is Made: it is
// written before its object exists, so it names the object by its place alone; why that
// is enough is in undo_exec.cc (made) and docs/crash-model.md.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <string>
#include <string_view>

#include "store/backing.h"

namespace txnfs {

enum class StepKind : char {
  Attrs = 'A',    // obj's attributes before the transaction first changed it
  Data = 'D',     // [off, off+len) of obj before an in-place change; clone in <seq>.d
  Created = 'C',  // obj made by the transaction, placed at (dir, name); born as <seq>.d
                  // (written by daemons before Made existed; still undone)
  Linked = 'L',   // a new name (dir, name) for the existing obj
  Removed = 'R',  // (dir, name) of obj was removed; obj stashed as <seq>.d
  Renamed = 'N',  // obj moved (dir, name) -> (dir2, name2) with `flags`; a displaced
                  // target (if displaced) stashed as <seq>.d
  Xattrs = 'X',   // all xattrs of obj before the transaction changed one; snapshot
                  // as the xattrs of <seq>.d (an empty regular file, or an empty
                  // directory when obj is one: default ACLs exist only on directories)
  Made = 'M',     // the transaction is about to make an object (a directory if flags is
                  // 1) at `name` in the directory obj, where there is none: written
                  // before the object exists, so undo knows it by its place
};

struct UndoStep {
  StepKind kind = StepKind::Attrs;
  uint64_t seq = 0;  // position in the log (from 1); undo runs in descending seq order
  BackingId obj;     // the object concerned
  BackingId dir, dir2;
  std::string name, name2;
  // Attrs
  uint32_t mode = 0, uid = 0, gid = 0;
  uint64_t size = 0;
  timespec atime{}, mtime{};
  // Data
  uint64_t off = 0, len = 0;
  // Renamed: renameat2 flags; Removed/Created: 1 when obj is a directory; Made: 1 when
  // the object made is one
  uint32_t flags = 0;
  bool displaced = false;  // Renamed over an existing target
};

// Text encoding of a record: at most kMaxEncoded bytes, any byte but NUL.
// Versioned ("1 <kind> <seq> ... #<checksum>"); the format is described in
// undo_step.cc. Only the members a kind uses are encoded (decode leaves the others at
// their defaults). With XFS handles (16 bytes) the longest record, a Renamed with two
// 255-byte names and every number at its maximum, is 762 bytes. Throws Error for a
// step that cannot be recorded (invalid name, bad handle, over kMaxEncoded).
inline constexpr size_t kMaxEncoded = 1000;
std::string encode_step(const UndoStep &s);
// Throws Error on malformed input (a damaged record is reported, never guessed at).
UndoStep decode_step(std::string_view text);

// "0000000000000007" for seq 7; the data object is that + ".d".
std::string step_name(uint64_t seq);

// "Attrs", "Data", ... for messages.
const char *step_kind_name(StepKind k);

}  // namespace txnfs
