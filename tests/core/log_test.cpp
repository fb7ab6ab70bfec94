#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "topotrain/core/files.h"
#include "topotrain/core/log.h"

using namespace topotrain;

TEST(Log, TimestampIsLocalTimeToTheSecond) {
  std::tm when{};
  when.tm_year = 2026 - 1900;
  when.tm_mon = 11;
  when.tm_mday = 1;
  when.tm_hour = 10;
  when.tm_min = 41;
  when.tm_sec = 7;
  when.tm_isdst = -1;
  EXPECT_EQ(log_timestamp(std::mktime(&when)), "2026-12-01 10:41:07");
}

TEST(Log, LinesGoToTheFileWithTimestampAndPrefix) {
  const std::string dir = make_temp_directory("topotrain-log-");
  const std::string path = join_path(dir, "log.txt");
  { std::ofstream(path) << "an earlier run's line\n"; }
  log_configure(0, "trainer", LogLevel::info, false);
  log_to_file(path);
  log_info("dataset loaded");
  log_debug("below the level: not written");
  log_warn("disk almost full");
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string stamp = R"(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})";
  EXPECT_TRUE(std::regex_match(text.str(), std::regex("an earlier run's line\n" + stamp +
                                                      R"( \[rank 0 trainer\] dataset loaded\n)" + stamp +
                                                      R"( \[rank 0 trainer\] warning: disk almost full\n)")))
      << text.str();
  remove_tree(dir);
}

TEST(Log, FixedPoint) {
  EXPECT_EQ(fixed_point(0.4249, 2), "0.42");
  EXPECT_EQ(fixed_point(12.0, 1), "12.0");
}
