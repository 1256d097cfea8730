// What a benchmark run writes besides its messages: the tables on stdout and the raw
// samples, one CSV row each, appended to a --csv file.
#pragma once
#include <fstream>
#include <memory>
#include <string>

namespace bench {

// Opens PATH for appending rows, first writing the line HEADER when the file is new or
// empty; throws std::runtime_error when it cannot be opened.
std::unique_ptr<std::ofstream> open_csv(const std::string &path, const std::string &header);

// The id of this run in its CSV rows: "<unix time>-<pid>".
std::string make_run_id();

// Prints the header row H of a table and under it a rule of dashes as wide as H.
void print_table_header(const std::string &h);

}  // namespace bench
