// Reading a file that another process may be rewriting in place (an editor, configuration
// management): the content is taken only once the file has stopped changing, so that a
// load never sees the first half of a new version.
//
// A read is accepted when two reads in a row give the same bytes and the same stat
// (device, inode, size, mtime, ctime), and the file has not changed for `settle`: its mtime
// is that old, or the reader has seen it unchanged for that long (an mtime in the future
// cannot hold a load back). Otherwise the file is read again until `limit` has passed.
// A file replaced by rename and written more than `settle` ago is read twice, at once.
//
// Blocks the calling thread for up to `limit` (plus one read). Any thread.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace sluice::config {

struct stable_read_options {
    std::chrono::milliseconds settle{100};
    std::chrono::milliseconds limit{1000};
    std::function<void()> after_read;  // tests: runs after each read, to change the file between reads
};

// The file's content. Throws config_error "PATH: cannot read: REASON", or
// "PATH: changed while being read ..." when it did not hold still within `limit`.
std::string read_stable_file(const std::string& path, const stable_read_options& options = {});

}  // namespace sluice::config
