// The settings schema against the sources and the docs: the README's settings table is
// the schema's reference table, every key is read by the code, and no doc table names a
// key that does not exist.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>

#include "topotrain/core/files.h"
#include "topotrain/core/settings.h"
#include "topotrain/core/settings_reference.h"

using namespace topotrain;

namespace {

const std::string kSource = TOPOTRAIN_SOURCE_DIR;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Every regular file under `directory`, recursively.
void collect_files(const std::string& directory, std::vector<std::string>& files) {
  for (const auto& name : list_directory(directory)) {
    const std::string path = join_path(directory, name);
    if (is_directory(path)) collect_files(path, files);
    else if (is_regular_file(path)) files.push_back(path);
  }
}

std::vector<std::string> markdown_files() {
  std::vector<std::string> files = {join_path(kSource, "README.md")};
  for (const auto& name : list_directory(join_path(kSource, "docs")))
    if (file_extension(name) == ".md") files.push_back(join_path(join_path(kSource, "docs"), name));
  return files;
}

}  // namespace

TEST(SettingsReference, ReadmeTableIsTheSchemasTable) {
  const std::string readme = read_text(join_path(kSource, "README.md"));
  const std::string table = settings_reference_markdown();
  const std::string header = table.substr(0, table.find('\n') + 1);
  const auto begin = readme.find(header);
  ASSERT_NE(begin, std::string::npos) << "README.md has no settings table starting with " << header
                                      << "paste this one (moe_train --help-settings prints it as text):\n"
                                      << table;
  // The table runs to the first line that is not a table row.
  std::size_t end = begin;
  while (end < readme.size() && readme[end] == '|') end = readme.find('\n', end) + 1;
  EXPECT_EQ(readme.substr(begin, end - begin), table) << "README.md's settings table differs from the schema; "
                                                         "replace it with the expected text above";
}

TEST(SettingsReference, HelpTextListsEveryKeyWithWhatItAccepts) {
  const std::string text = settings_reference_text();
  for (const auto& row : settings_reference_rows()) {
    const auto at = text.find("  " + row.key + " ");
    ASSERT_NE(at, std::string::npos) << row.key;
    const std::string line = text.substr(at, text.find('\n', at) - at);
    EXPECT_NE(line.find(row.accepts), std::string::npos) << line;
    EXPECT_NE(line.find(row.meaning), std::string::npos) << line;
  }
  EXPECT_NE(text.find("train.warmup"), std::string::npos);
  EXPECT_NE(text.find("[0, 1]"), std::string::npos);
  EXPECT_NE(text.find("auto | bf16 | fp32"), std::string::npos);
}

// A key that nothing reads is a setting that does nothing: the code reads settings by
// their full key as a string literal ("train.lr"), outside the schema.
TEST(SettingsReference, EveryKeyIsReadByTheCode) {
  std::vector<std::string> files;
  collect_files(join_path(kSource, "src"), files);
  std::string code;
  for (const auto& path : files) {
    const std::string ext = file_extension(path);
    if (file_name(path) == "settings_schema.cpp" || (ext != ".cpp" && ext != ".h" && ext != ".cu")) continue;
    code += read_text(path);
  }
  ASSERT_FALSE(code.empty());
  for (const auto& spec : setting_specs())
    EXPECT_NE(code.find('"' + spec.key + '"'), std::string::npos)
        << spec.key << " is declared in the schema but no source under src/ reads it: make it act or remove it";
}

TEST(SettingsReference, DocTablesNameOnlyKeysThatExist) {
  const std::regex key(R"(\b(model|data|train|checkpoint|log)\.[a-z_0-9]+\b)");
  std::size_t named = 0;
  for (const auto& path : markdown_files()) {
    std::istringstream lines(read_text(path));
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      if (line.empty() || line[0] != '|') continue;
      for (std::sregex_iterator it(line.begin(), line.end(), key), end; it != end; ++it) {
        ++named;
        EXPECT_NE(find_setting(it->str()), nullptr)
            << path << ":" << number << ": the table names setting '" << it->str()
            << "', which does not exist (`moe_train --help-settings` lists every key)";
      }
    }
  }
  EXPECT_GT(named, setting_specs().size());  // the README's table alone names every key
}
