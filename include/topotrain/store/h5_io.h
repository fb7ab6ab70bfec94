// Small typed helpers over the HDF5 C API shared by checkpoints and the timing log:
// scalar attributes, text datasets, extendible 2-D float64 tables. Every failure throws
// std::runtime_error naming the object; callers add the file name.
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "topotrain/core/hdf5_handle.h"

namespace topotrain {

// Serialises HDF5 calls across threads when the HDF5 library was built without its own
// lock (the checkpoint writer's thread and the timing log may run at once). Debian's and
// Ubuntu's serial HDF5 are thread-safe, and then this lock is a no-op.
std::unique_lock<std::mutex> h5_serialize();

void write_attribute(hid_t object, const std::string& name, std::int64_t value);
void write_attribute(hid_t object, const std::string& name, double value);
void write_attribute(hid_t object, const std::string& name, const std::string& value);
bool has_attribute(hid_t object, const std::string& name);
std::int64_t read_int_attribute(hid_t object, const std::string& name);
double read_real_attribute(hid_t object, const std::string& name);
std::string read_string_attribute(hid_t object, const std::string& name);
std::vector<std::string> attribute_names(hid_t object);

// Text of any length as a scalar string dataset (attributes are limited to 64 KiB).
void write_text(hid_t location, const std::string& name, const std::string& text);
std::string read_text(hid_t location, const std::string& name);

bool link_exists(hid_t location, const std::string& path);
// Names of the direct children of a group, in name order.
std::vector<std::string> child_names(hid_t group);

// A 2-D float64 dataset [rows, fields] that grows by appending rows. Its `fields`
// attribute lists the column names, comma-separated; readers find columns by name.
class H5Table {
 public:
  // Creates the dataset `name` in `location` (chunked, unlimited rows).
  H5Table(hid_t location, const std::string& name, const std::vector<std::string>& fields, std::size_t chunk_rows = 1024);
  void append(const std::vector<double>& row_major_values);
  std::size_t rows() const { return rows_; }
  std::size_t columns() const { return columns_; }

 private:
  H5Handle dataset_;
  std::string name_;
  std::size_t columns_ = 0;
  std::size_t rows_ = 0;
};

// A whole table read back into memory.
struct TableData {
  std::vector<std::string> fields;
  std::vector<double> values;  // row-major [rows, fields]
  std::size_t rows = 0;

  // Column index of `field`, or -1.
  int column(const std::string& field) const;
  double at(std::size_t row, int column) const { return values[row * fields.size() + static_cast<std::size_t>(column)]; }
};

TableData read_table(hid_t location, const std::string& name);

}  // namespace topotrain
