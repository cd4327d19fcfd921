// The commit the build was made from: `git rev-parse --short=12 HEAD`, with "-dirty" when tracked
// files differed from it, "unknown" outside a git checkout. Its source is written at every build
// (experiments/common/git_commit.cmake), not at configure time, so a build after a new commit
// reports that commit (`attnsim info`, the git_commit attribute of every result file).
#pragma once

namespace attnsim::build {
const char* git_commit();
}  // namespace attnsim::build
