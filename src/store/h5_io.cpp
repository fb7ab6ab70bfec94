#include "topotrain/store/h5_io.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "topotrain/core/error.h"

namespace topotrain {
namespace {

H5Handle string_type(std::size_t length) {
  H5Handle type(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy(string)");
  // NULLTERM needs one byte for the terminator; an empty string still has size 1.
  h5_check(H5Tset_size(type, length + 1), "H5Tset_size");
  h5_check(H5Tset_strpad(type, H5T_STR_NULLTERM), "H5Tset_strpad");
  return type;
}

H5Handle scalar_space() { return H5Handle(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate(scalar)"); }

void write_scalar_attribute(hid_t object, const std::string& name, hid_t type, const void* value) {
  if (H5Aexists(object, name.c_str()) > 0) h5_check(H5Adelete(object, name.c_str()), "H5Adelete " + name);
  H5Handle space = scalar_space();
  H5Handle attribute(H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                     "cannot create attribute " + name);
  h5_check(H5Awrite(attribute, type, value), "cannot write attribute " + name);
}

H5Handle open_attribute(hid_t object, const std::string& name) {
  return H5Handle(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "missing attribute " + name);
}

// Reads a fixed- or variable-length string from an attribute or dataset.
template <typename ReadFn>
std::string read_string(hid_t file_type, const std::string& what, ReadFn read) {
  if (H5Tget_class(file_type) != H5T_STRING) throw std::runtime_error(what + " is not a string");
  if (H5Tis_variable_str(file_type) > 0) {
    H5Handle memory(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy");
    h5_check(H5Tset_size(memory, H5T_VARIABLE), "H5Tset_size");
    char* text = nullptr;
    h5_check(read(memory.get(), &text), "cannot read " + what);
    std::string out = text ? text : "";
    H5free_memory(text);
    return out;
  }
  const std::size_t size = H5Tget_size(file_type);
  std::string buffer(size + 1, '\0');
  H5Handle memory = string_type(size);
  h5_check(read(memory.get(), buffer.data()), "cannot read " + what);
  return std::string(buffer.c_str());
}

}  // namespace

std::unique_lock<std::mutex> h5_serialize() {
  static std::mutex mutex;
  static const bool threadsafe = [] {
    hbool_t ts = 0;
    return H5is_library_threadsafe(&ts) >= 0 && ts;
  }();
  return threadsafe ? std::unique_lock<std::mutex>() : std::unique_lock<std::mutex>(mutex);
}

void write_attribute(hid_t object, const std::string& name, std::int64_t value) {
  write_scalar_attribute(object, name, H5T_NATIVE_INT64, &value);
}

void write_attribute(hid_t object, const std::string& name, double value) {
  write_scalar_attribute(object, name, H5T_NATIVE_DOUBLE, &value);
}

void write_attribute(hid_t object, const std::string& name, const std::string& value) {
  H5Handle type = string_type(value.size());
  write_scalar_attribute(object, name, type, value.c_str());
}

bool has_attribute(hid_t object, const std::string& name) { return H5Aexists(object, name.c_str()) > 0; }

std::int64_t read_int_attribute(hid_t object, const std::string& name) {
  H5Handle attribute = open_attribute(object, name);
  H5Handle type(H5Aget_type(attribute), H5Tclose, "H5Aget_type " + name);
  if (H5Tget_class(type) != H5T_INTEGER) throw std::runtime_error("attribute " + name + " is not an integer");
  std::int64_t value = 0;
  h5_check(H5Aread(attribute, H5T_NATIVE_INT64, &value), "cannot read attribute " + name);
  return value;
}

double read_real_attribute(hid_t object, const std::string& name) {
  H5Handle attribute = open_attribute(object, name);
  double value = 0;
  h5_check(H5Aread(attribute, H5T_NATIVE_DOUBLE, &value), "cannot read attribute " + name);
  return value;
}

std::string read_string_attribute(hid_t object, const std::string& name) {
  H5Handle attribute = open_attribute(object, name);
  H5Handle type(H5Aget_type(attribute), H5Tclose, "H5Aget_type " + name);
  return read_string(type, "attribute " + name,
                     [&](hid_t memory, void* buffer) { return H5Aread(attribute, memory, buffer); });
}

std::vector<std::string> attribute_names(hid_t object) {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5A_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  hsize_t index = 0;
  h5_check(H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &index, collect, &names), "H5Aiterate");
  return names;
}

void write_text(hid_t location, const std::string& name, const std::string& text) {
  H5Handle type = string_type(text.size());
  H5Handle space = scalar_space();
  H5Handle dataset(H5Dcreate2(location, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Dclose,
                   "cannot create text " + name);
  h5_check(H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, text.c_str()), "cannot write text " + name);
}

std::string read_text(hid_t location, const std::string& name) {
  H5Handle dataset(H5Dopen2(location, name.c_str(), H5P_DEFAULT), H5Dclose, "missing text " + name);
  H5Handle type(H5Dget_type(dataset), H5Tclose, "H5Dget_type " + name);
  return read_string(type, "text " + name, [&](hid_t memory, void* buffer) {
    return H5Dread(dataset, memory, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer);
  });
}

bool link_exists(hid_t location, const std::string& path) {
  // H5Lexists needs every intermediate group to exist; walk the path one link at a time.
  std::string prefix;
  std::istringstream parts(path);
  for (std::string part; std::getline(parts, part, '/');) {
    if (part.empty()) continue;
    prefix += (prefix.empty() ? "" : "/") + part;
    if (H5Lexists(location, prefix.c_str(), H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

std::vector<std::string> child_names(hid_t group) {
  std::vector<std::string> names;
  auto collect = [](hid_t, const char* name, const H5L_info_t*, void* data) -> herr_t {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  };
  hsize_t index = 0;
  h5_check(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &index, collect, &names), "H5Literate");
  return names;
}

H5Table::H5Table(hid_t location, const std::string& name, const std::vector<std::string>& fields,
                 std::size_t chunk_rows)
    : name_(name), columns_(fields.size()) {
  if (fields.empty()) throw std::runtime_error("table " + name + " needs at least one field");
  hsize_t dims[2] = {0, columns_};
  hsize_t max_dims[2] = {H5S_UNLIMITED, columns_};
  hsize_t chunk[2] = {chunk_rows, columns_};
  H5Handle space(H5Screate_simple(2, dims, max_dims), H5Sclose, "H5Screate_simple " + name);
  H5Handle create(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "H5Pcreate");
  h5_check(H5Pset_chunk(create, 2, chunk), "H5Pset_chunk " + name);
  dataset_ = H5Handle(H5Dcreate2(location, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, create, H5P_DEFAULT),
                      H5Dclose, "cannot create table " + name);
  std::string joined;
  for (const auto& field : fields) {
    if (field.find(',') != std::string::npos) throw std::runtime_error("table field '" + field + "' contains a comma");
    joined += (joined.empty() ? "" : ",") + field;
  }
  write_attribute(dataset_, "fields", joined);
}

void H5Table::append(const std::vector<double>& values) {
  if (values.size() % columns_ != 0)
    throw std::runtime_error(cat("table ", name_, ": ", values.size(), " values are not whole rows of ", columns_));
  const std::size_t added = values.size() / columns_;
  if (added == 0) return;
  hsize_t new_dims[2] = {rows_ + added, columns_};
  h5_check(H5Dset_extent(dataset_, new_dims), "cannot extend table " + name_);
  H5Handle file_space(H5Dget_space(dataset_), H5Sclose, "H5Dget_space " + name_);
  hsize_t start[2] = {rows_, 0};
  hsize_t count[2] = {added, columns_};
  h5_check(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, count, nullptr), "H5Sselect_hyperslab");
  H5Handle memory_space(H5Screate_simple(2, count, nullptr), H5Sclose, "H5Screate_simple");
  h5_check(H5Dwrite(dataset_, H5T_NATIVE_DOUBLE, memory_space, file_space, H5P_DEFAULT, values.data()),
           "cannot append to table " + name_);
  rows_ += added;
}

int TableData::column(const std::string& field) const {
  auto it = std::find(fields.begin(), fields.end(), field);
  return it == fields.end() ? -1 : static_cast<int>(it - fields.begin());
}

TableData read_table(hid_t location, const std::string& name) {
  H5Handle dataset(H5Dopen2(location, name.c_str(), H5P_DEFAULT), H5Dclose, "missing table " + name);
  TableData table;
  std::istringstream fields(read_string_attribute(dataset, "fields"));
  for (std::string field; std::getline(fields, field, ',');) table.fields.push_back(field);
  H5Handle space(H5Dget_space(dataset), H5Sclose, "H5Dget_space " + name);
  hsize_t dims[2] = {0, 0};
  if (H5Sget_simple_extent_ndims(space) != 2 || H5Sget_simple_extent_dims(space, dims, nullptr) < 0 ||
      dims[1] != table.fields.size())
    throw std::runtime_error(cat("table ", name, " is not [rows, ", table.fields.size(), " fields]"));
  table.rows = dims[0];
  table.values.resize(dims[0] * dims[1]);
  if (!table.values.empty())
    h5_check(H5Dread(dataset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, table.values.data()),
             "cannot read table " + name);
  return table;
}

}  // namespace topotrain
