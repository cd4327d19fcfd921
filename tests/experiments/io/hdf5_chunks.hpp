// Test helper: where a dataset's first chunk lies in its file, for tests that flip bytes in it
// (Fletcher-32 and corrupt-chunk checks in dump_test.cpp and cli_test.cpp).
#pragma once

#include <gtest/gtest.h>
#include <hdf5.h>

#include <string>
#include <utility>

namespace attnsim::testio {

// File offset and size of the first chunk of dataset `name` (H5Dget_chunk_info, HDF5 >= 1.10.5).
inline std::pair<haddr_t, hsize_t> first_chunk(const std::string& file, const std::string& name) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t ds = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  hsize_t offset[8] = {};
  unsigned mask = 0;
  haddr_t addr = 0;
  hsize_t size = 0;
  const hid_t space = H5Dget_space(ds);
  EXPECT_GE(H5Dget_chunk_info(ds, space, 0, offset, &mask, &addr, &size), 0) << name;
  H5Sclose(space);
  H5Dclose(ds);
  H5Fclose(f);
  return {addr, size};
}

}  // namespace attnsim::testio
