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

// Rates from a stalled CPU run to a fast GPU node: three significant digits in a unit
// their size asks for, never "0.0" or "0.00" (as "0.1 Ktok/s (0.0 per rank)" was).
TEST(Log, RatesNeverRoundToZero) {
  EXPECT_EQ(format_rate(0.05), "0.05 tok/s");
  EXPECT_EQ(format_rate(0.1234), "0.123 tok/s");
  EXPECT_EQ(format_rate(0), "0 tok/s");
  EXPECT_EQ(format_rate(1), "1.00 tok/s");
  EXPECT_EQ(format_rate(12.34), "12.3 tok/s");
  EXPECT_EQ(format_rate(123.4), "123 tok/s");
  EXPECT_EQ(format_rate(999.4), "999 tok/s");
  EXPECT_EQ(format_rate(999.6), "1.00 Ktok/s");
  EXPECT_EQ(format_rate(41200), "41.2 Ktok/s");
  EXPECT_EQ(format_rate(5e6), "5.00 Mtok/s");
  EXPECT_EQ(format_rate(2.5e6, "B/s"), "2.50 MB/s");
  for (double rate = 0.05; rate <= 5e6; rate *= 1.37) {
    const std::string text = format_rate(rate);
    std::smatch number;
    ASSERT_TRUE(std::regex_match(text, number, std::regex(R"(([0-9.]+) ([KM]?)tok/s)"))) << text;
    const double unit = number[2] == "K" ? 1e3 : number[2] == "M" ? 1e6 : 1;
    EXPECT_NEAR(std::stod(number[1]) * unit, rate, 0.005 * rate) << text;  // three significant digits
  }
}

// log.level = "warn" hides info lines but keeps progress lines: they show the run is alive.
TEST(Log, WarnLevelKeepsProgressLines) {
  const std::string dir = make_temp_directory("topotrain-log-");
  const std::string path = join_path(dir, "log.txt");
  log_configure(0, "trainer", LogLevel::warn, false);
  log_to_file(path);
  log_info("an info line");
  log_progress("step 10 | loss 3.2");
  log_error_in_file("the reason the job ended");
  log_configure(0, "trainer", LogLevel::error, false);
  log_progress("step 20 | loss 3.1");
  log_configure(0, "trainer", LogLevel::info, false);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().find("an info line"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("[rank 0 trainer] step 10 | loss 3.2\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("[rank 0 trainer] error: the reason the job ended\n"), std::string::npos) << text.str();
  EXPECT_EQ(text.str().find("step 20"), std::string::npos) << text.str();
  remove_tree(dir);
}
